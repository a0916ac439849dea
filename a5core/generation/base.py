"""The generation interface shared by evaluation, Expert Iteration and GRPO."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from a5core.config import SamplingConfig

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Completion:
    """One sampled continuation. `text` includes a matched stop string; `token_ids` are the generated ids.

    `token_entropies`: entropy (nats) of the policy's untempered next-token distribution at each generated
    token, when the backend computes it while sampling (hf); None where it does not (vLLM).
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    token_entropies: tuple[float, ...] | None = None


class Backend(Protocol):
    def generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool = True) -> list[list[Completion]]:
        """`sampling.n` completions for each prompt, in prompt order."""

    def sync_weights(self, policy) -> None:
        """Make the engine generate with `policy`'s current weights."""


def truncate_at_stop(text: str, stops: list[str] | tuple[str, ...]) -> tuple[str, bool]:
    """Cut `text` after the earliest stop string (kept, as vLLM's include_stop_str_in_output)."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best):
            best = i + len(s)
    return (text[:best], True) if best is not None else (text, False)
