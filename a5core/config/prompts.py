"""Prompt templates of the handout, and what goes with each: its reward function and its stop strings."""

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
# Generation stops after `</answer>` (kept in the output) for r1_zero, as in the handout; question_only answers in
# \boxed{} and runs to EOS or max_tokens, as the official question_only evaluation does.
STOPS: dict[str, tuple[str, ...]] = {"r1_zero": ("</answer>",), "question_only": ()}

# The r1_zero prompt as a chat template, saved with every trained model so that
# `tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)`
# gives exactly the prompt the model was trained on.
R1_ZERO_CHAT_TEMPLATE = (
    "{%- for message in messages -%}{%- if message['role'] == 'user' -%}"
    + R1_ZERO.split("{question}")[0]
    + "{{ message['content'] }}"
    + R1_ZERO.split("{question}")[1]
    + "{%- elif message['role'] == 'assistant' -%}{{ ' ' + message['content'] }}{%- endif -%}{%- endfor -%}"
)


def build_prompt(question: str, prompt: str = "r1_zero") -> str:
    if prompt not in PROMPTS:
        raise ValueError(f"unknown prompt {prompt!r}; choose one of {sorted(PROMPTS)}")
    return PROMPTS[prompt].format(question=question)
