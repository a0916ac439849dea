"""The verified math reward: extraction, normalization, screening, equivalence, bounded grading."""

from a5core.grader.pool import GraderPool, detailed_grader, grade_batch, load_reward_fn
from a5core.grader.reward import (
    GradeResult,
    GroundTruthError,
    check_ground_truth,
    grade,
    question_only_reward_fn,
    r1_zero_reward_fn,
    r1_zero_strict_reward_fn,
)

__all__ = [
    "GradeResult",
    "GraderPool",
    "GroundTruthError",
    "check_ground_truth",
    "detailed_grader",
    "grade",
    "grade_batch",
    "load_reward_fn",
    "question_only_reward_fn",
    "r1_zero_reward_fn",
    "r1_zero_strict_reward_fn",
]
