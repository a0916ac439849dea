"""a5core: the library behind the a5 pipeline (CS336 A5: SFT, Expert Iteration, GRPO on math).

The handout's functions are importable from the top level (`from a5core import masked_normalize`), but
imported lazily: a stage that imports `a5core.stage` loads only what it uses, so its DVC deps (checked by
tests/test_dvc_deps.py) list only those modules and editing, say, the DPO loss reruns nothing.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "a5core.advantages": ["compute_group_normalized_rewards", "group_normalize"],
    "a5core.dpo": ["compute_per_instance_dpo_loss"],
    "a5core.grader": [
        "grade",
        "grade_batch",
        "question_only_reward_fn",
        "r1_zero_reward_fn",
        "r1_zero_strict_reward_fn",
    ],
    "a5core.logprobs": ["compute_entropy", "get_response_log_probs"],
    "a5core.losses": [
        "compute_grpo_clip_loss",
        "compute_naive_policy_gradient_loss",
        "compute_policy_gradient_loss",
        "grpo_microbatch_train_step",
        "masked_mean",
        "masked_normalize",
        "sft_microbatch_train_step",
    ],
    "a5core.tokenization": ["tokenize_prompt_and_output"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'a5core' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
