"""An example custom reward: `grpo.reward_fn: rewards.examples:answer_only_reward_fn`."""

from __future__ import annotations

from a5core.grader import r1_zero_reward_fn


def answer_only_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """r1_zero's verdicts, with the answer alone as the reward (no credit for the format without the answer)."""
    verdicts = r1_zero_reward_fn(response, ground_truth)
    return {**verdicts, "reward": verdicts["answer_reward"]}
