"""An example custom reward: `grpo.reward_fn: rewards.examples:answer_only_reward_fn`."""

from __future__ import annotations

from a5core.grader import r1_zero_reward_fn


def answer_only_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """r1_zero's verdicts, with the answer alone as the reward (no credit for the format without the answer)."""
    verdicts = r1_zero_reward_fn(response, ground_truth)
    return {**verdicts, "reward": verdicts["answer_reward"]}


def answer_characters_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """The share of the ground truth's characters (each distinct one) found anywhere in the response: a lenient,
    partial reward (a policy can game it by listing digits) that the smoke profile's tiny random model earns by chance
    (about two thirds on average, in full one rollout in two), so its EI rounds keep rollouts and its GRPO groups have
    unequal rewards: the smoke DAG's RL stages move the weights (tests/test_smoke_dag.py). Not for real runs."""
    wanted = set(ground_truth.strip())
    share = sum(c in response for c in wanted) / len(wanted) if wanted else 0.0
    return {"format_reward": 0.0, "answer_reward": share, "reward": share}
