"""The generation interface shared by evaluation, Expert Iteration and GRPO."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from a5core.base.seeds import derive_seed
from a5core.config.sections import SamplingConfig

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Completion:
    """One sampled continuation. `text` ends right after a matched stop string; `token_ids` are exactly the sampled
    ids (the one that completed the stop string, and a sampled EOS, included), which training uses as they are.

    `token_entropies`: entropy (nats) of the policy's untempered next-token distribution at each generated
    token, when the backend computes it while sampling (hf); None where it does not (vLLM).
    `token_logprobs`: the engine's own log-prob of each sampled token under that untempered distribution (hf from
    its sampling logits, vLLM's raw logprobs), for GRPO's truncated importance sampling; None when not returned.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    token_entropies: tuple[float, ...] | None = None
    token_logprobs: tuple[float, ...] | None = None


class Backend(Protocol):
    takes_shards: bool  # its facts (a5core/config/sections.py BACKEND_FACTS): under fsdp2, synced from the shards

    def generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool = True) -> list[list[Completion]]:
        """`sampling.n` completions for each prompt, in prompt order."""

    def sync_weights(self, policy) -> None:
        """Make the engine generate with `policy`'s current weights."""

    def keep_own_weights(self) -> None:
        """Generate from weights of the engine's own, which only a sync changes (asynchronous rollouts)."""


def request_seed(seed: int, prompt_index: int, sample_index: int = 0) -> int:
    """The seed of one request's random stream: distinct per (seed, prompt, sample), stable across batchings."""
    return derive_seed(seed, "request", prompt_index, sample_index)


def truncate_at_stop(text: str, stops: list[str] | tuple[str, ...]) -> tuple[str, bool]:
    """Cut `text` after the earliest stop string (kept, as vLLM's include_stop_str_in_output)."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best):
            best = i + len(s)
    return (text[:best], True) if best is not None else (text, False)
