"""The CS336 A5 handout's functions under the names its adapters use, from one import
(`from a5core.handout import masked_normalize`). Nothing in a5core imports this module."""

from __future__ import annotations

from a5core.grader import grade, grade_batch, question_only_reward_fn, r1_zero_reward_fn, r1_zero_strict_reward_fn
from a5core.model.logprobs import compute_entropy, get_response_log_probs
from a5core.model.tokenization import tokenize_prompt_and_output
from a5core.rl.advantages import compute_group_normalized_rewards, group_normalize
from a5core.rl.dpo import compute_per_instance_dpo_loss
from a5core.rl.losses import (
    compute_grpo_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    grpo_microbatch_train_step,
    masked_mean,
    masked_normalize,
    sft_microbatch_train_step,
)

__all__ = [
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_naive_policy_gradient_loss",
    "compute_per_instance_dpo_loss",
    "compute_policy_gradient_loss",
    "get_response_log_probs",
    "grade",
    "grade_batch",
    "group_normalize",
    "grpo_microbatch_train_step",
    "masked_mean",
    "masked_normalize",
    "question_only_reward_fn",
    "r1_zero_reward_fn",
    "r1_zero_strict_reward_fn",
    "sft_microbatch_train_step",
    "tokenize_prompt_and_output",
]
