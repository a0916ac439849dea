"""The verified math reward: extraction, screening, normalization, equivalence, batch grading."""
from a5core.grader.pool import GraderPool, detailed_grader, grade_batch, load_reward_fn
from a5core.grader.reward import GradeResult, grade, question_only_reward_fn, r1_zero_reward_fn

__all__ = ["GradeResult", "GraderPool", "detailed_grader", "grade", "grade_batch", "load_reward_fn",
           "question_only_reward_fn", "r1_zero_reward_fn"]
