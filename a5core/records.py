"""The records passed between the steps of evaluation, Expert Iteration and GRPO, and their Parquet schemas.

One record type per Parquet schema: a schema is derived from its dataclass (`parquet_schema`), and `row()` gives
exactly its columns. Fields that live only in memory (sampled ids, per-token entropies) are not columns.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass

import pyarrow as pa
import torch

_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
MEMORY_ONLY = ("token_ids", "token_entropies")


def parquet_schema(cls) -> pa.Schema:
    """The Arrow schema of a record class: one column per field except the memory-only ones."""
    hints = typing.get_type_hints(cls)
    columns = []
    for f in dataclasses.fields(cls):
        if f.name in MEMORY_ONLY:
            continue
        tp = hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):  # `str | None` -> a nullable string
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        columns.append((f.name, _ARROW[tp]))
    return pa.schema(columns)


@dataclass(frozen=True)
class GradedSample:
    """One sampled response to one question, graded: a row of `generations.parquet` (and the sampled ids)."""

    unique_id: str
    sample_index: int  # which of the k samples of the question
    prompt: str
    response: str
    ground_truth: str
    extracted: str | None  # the answer the grader read, if any
    status: str  # grading status: correct, wrong, format_error, unparsable, timeout, ...
    format_reward: float
    answer_reward: float
    reward: float
    output_tokens: int
    finish_reason: str
    subject: str
    level: str
    token_ids: tuple[int, ...] = ()  # exactly the sampled ids (memory only)
    token_entropies: tuple[float, ...] | None = None  # entropy of each sampling distribution, when recorded

    def row(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in MEMORY_ONLY}


@dataclass(frozen=True)
class RoundRollout:
    """One Expert Iteration rollout: a row of `rollouts.parquet`."""

    unique_id: str
    sample_index: int
    response: str
    format_reward: float
    answer_reward: float
    reward: float
    status: str
    output_tokens: int
    mean_token_entropy: float
    kept: bool  # selected for the round's SFT data
    round: int

    @classmethod
    def of(cls, sample: GradedSample, entropy: float, kept: bool, round_idx: int) -> RoundRollout:
        names = {f.name for f in dataclasses.fields(cls)}
        shared = {k: v for k, v in dataclasses.asdict(sample).items() if k in names}
        return cls(**shared, mean_token_entropy=entropy, kept=kept, round=round_idx)

    def row(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class RolloutBatch:
    """One GRPO step's rollouts, ready for the optimizer steps (GRPO-Zero's `Episode`, batched).

    Rollout i is `prompt_ids[i] + output_ids[i]` (exactly the sampled ids); consecutive blocks of `group_size`
    rollouts answer the same question.
    """

    prompt_ids: list[list[int]]
    output_ids: list[list[int]]
    raw_rewards: torch.Tensor  # (N,)
    advantages: torch.Tensor  # (N,)
    pad_id: int
    old_log_probs: list[torch.Tensor] | None = None  # per rollout (T_i,), under the policy that sampled it

    def __len__(self) -> int:
        return len(self.output_ids)


GENERATION_SCHEMA = parquet_schema(GradedSample)
ROLLOUT_SCHEMA = parquet_schema(RoundRollout)
