"""grader: the verified math reward. May import base/ only. A response goes through five steps, one module each
(tests/test_grader.py checks every example here):

1. extract (`extract`): the answer and the format verdict.
   `...</think> <answer>\\boxed{\\dfrac12}</answer>` -> `\\dfrac12`
2. normalize (`normalize.normalize`): MATH conventions to one string.
   `\\dfrac12` -> `\\frac{1}{2}`, `10,\\!000` -> `10000`
3. screen (`normalize.screen`, `bounds`): refuse what must not reach a parser. `9^{9^{9}}` -> `Rejected`
4. parse (`parse`, ours; else `latex_gate` in front of latex2sympy): a bounded sympy value.
   `\\frac{1}{2}` -> 1/2; `\\cot x` -> cot(x) (only latex2sympy reads trig, log, floor)
5. equivalence (`equivalence`): as MATH graders judge. `0.5` = `\\frac{1}{2}`; `(1,2)` != `(2,1)`

`reward.grade_inline` runs the steps and returns a `GradeResult`; `pool` runs it in killable worker processes under a
wall-clock and memory bound; `single.grade` and the handout's reward functions run one call through that bound.
`latex_gate` is kept although few MATH ground truths need it: without it equal answers such as `\\log_2 8` for 3 score
wrong, which graders that parse LaTeX into sympy accept (reports/latex_gate.md, `python -m bench.latex_gate_share`).
"""

from a5core.grader.pool import GraderPool, detailed_grader, grade_batch, load_reward_fn
from a5core.grader.reward import GradeResult, GroundTruthError, check_ground_truth
from a5core.grader.single import grade, question_only_reward_fn, r1_zero_reward_fn, r1_zero_strict_reward_fn

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
