"""The reward each training stage trains on: one named `reward_fn` per stage (`grpo`, `ei`, `sft.filter_reward_fn`),
defaulting to its prompt's reward (`prompts.REWARD_FNS`), checked against the prompt, and named in the stage's
provenance. Validation keeps its own (`validation.reward_fn`): what a model is scored by is not what it trains on.
"""

from __future__ import annotations

from a5core.config.prompts import REWARD_FNS
from a5core.config.sections import reward_fn_problem

# The built-in rewards and the prompt whose output format each grades: a reward for another prompt's format would
# train on (or filter by) a format the rollouts never use. A custom reward (not listed) is taken at its word.
REWARD_PROMPTS = {
    "a5core.grader:r1_zero_reward_fn": "r1_zero",
    "a5core.grader:r1_zero_strict_reward_fn": "r1_zero",
    "a5core.grader:question_only_reward_fn": "question_only",
}


def training_reward(reward_fn: str | None, prompt: str) -> str:
    """The reward a stage trains on: its own `reward_fn`, or its prompt's."""
    return REWARD_FNS[prompt] if reward_fn is None else reward_fn


def reward_problems(reward_fn: str | None, prompt: str) -> list[str]:
    """Why `reward_fn` cannot grade rollouts of `prompt` (it does not import, or it grades another prompt's format)."""
    if reward_fn is None:
        return []
    problem = reward_fn_problem(reward_fn)
    if problem:
        return [problem]
    graded = REWARD_PROMPTS.get(reward_fn)
    if graded is not None and graded != prompt:
        return [f"reward_fn {reward_fn!r} grades the {graded!r} prompt's format, but the prompt is {prompt!r}"]
    return []
