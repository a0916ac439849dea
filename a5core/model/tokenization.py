"""Tokenization for SFT/RL: prompt and output tokenized separately, concatenated, right-padded.

Follows the CS336 A5 handout's `tokenize_prompt_and_output` exactly: the returned tensors are the
concatenation shifted by one (`input_ids = full[:, :-1]`, `labels = full[:, 1:]`) so that position t of
`labels` is the token predicted from position t of `input_ids`; `response_mask` marks label positions that
are output tokens. Special tokens are never added (the prompt template carries its own).
"""

from __future__ import annotations

import torch
from torch import Tensor


def pad_token_id(tokenizer) -> int:
    """The tokenizer's pad id, falling back to eos (most causal LMs define no pad token)."""
    pid = tokenizer.pad_token_id
    if pid is None:
        pid = tokenizer.eos_token_id
    if pid is None:
        raise ValueError("tokenizer defines neither a pad nor an eos token")
    return int(pid)


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """The prompt ids training uses (no special tokens: the template carries its own); rollouts get the same."""
    return [list(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]


def tokenize_prompt_and_output(prompt_strs: list[str], output_strs: list[str], tokenizer) -> dict[str, Tensor]:
    """Tokenize each (prompt, output) pair; see the module docstring for the layout."""
    if len(prompt_strs) != len(output_strs):
        raise ValueError(f"{len(prompt_strs)} prompts but {len(output_strs)} outputs")
    prompt_ids = tokenizer(list(prompt_strs), add_special_tokens=False)["input_ids"]
    output_ids = tokenizer(list(output_strs), add_special_tokens=False)["input_ids"]
    return tokenize_ids(prompt_ids, output_ids, pad_token_id(tokenizer))


def tokenize_ids(prompt_ids: list[list[int]], output_ids: list[list[int]], pad_id: int) -> dict[str, Tensor]:
    """The same layout from already-tokenized ids (used by RL, where outputs come back as ids)."""
    seqs = [list(p) + list(o) for p, o in zip(prompt_ids, output_ids)]
    max_len = max(len(s) for s in seqs)
    if max_len < 2:
        raise ValueError("every prompt+output pair is shorter than 2 tokens; nothing to predict")
    full = torch.full((len(seqs), max_len), pad_id, dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(seqs), max_len), dtype=torch.bool)  # (B, L): True on output tokens
    for i, (p, s) in enumerate(zip(prompt_ids, seqs)):
        full[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, len(p) : len(s)] = True
    return {
        "input_ids": full[:, :-1],  # (B, L-1)
        "labels": full[:, 1:],  # (B, L-1)
        "response_mask": mask[:, 1:],  # (B, L-1): label t is an output token
    }
