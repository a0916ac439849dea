"""Prompt templates of the handout and the reward function that goes with each."""
from __future__ import annotations

R1_ZERO = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process in the mind and then provides the User with the "
    "answer. The reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
    "</answer>.\nUser: {question}\nAssistant: <think>"
)
QUESTION_ONLY = "{question}"

PROMPTS = {"r1_zero": R1_ZERO, "question_only": QUESTION_ONLY}
REWARD_FNS = {"r1_zero": "a5core.grader:r1_zero_reward_fn", "question_only": "a5core.grader:question_only_reward_fn"}


def build_prompt(question: str, prompt: str = "r1_zero") -> str:
    if prompt not in PROMPTS:
        raise ValueError(f"unknown prompt {prompt!r}; choose one of {sorted(PROMPTS)}")
    return PROMPTS[prompt].format(question=question)
