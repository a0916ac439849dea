"""The records passed between the stages and their steps (prepared problems and SFT traces, graded samples, EI
rollouts), their Parquet schemas, and the check of a Parquet file a stage reads.

One record type per Parquet schema: a schema is derived from its dataclass (`parquet_schema`), and `row()` gives
exactly its columns. Fields that live only in memory (sampled ids, per-token entropies) are not columns.
`read_rows(path, columns)` checks a file against the same types before any work: a bad file is a `DataError` that
names it and the column, not an Arrow error after an hour of evaluation.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from a5core.base.errors import ProjectError

if TYPE_CHECKING:  # only RolloutBatch's annotations name torch: reading records (prepare_math) needs no torch
    import torch

_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
MEMORY_ONLY = ("token_ids", "token_entropies", "token_logprobs")


class DataError(ProjectError, ValueError):
    """Bad input data; the message names the file, the line or row, and the field."""

    hint = "fix the data file or the data params, then rerun"


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
class Problem:
    """A prepared question: a row of `data/prepared/{train,validation}.parquet`."""

    unique_id: str
    problem: str
    answer: str  # the ground truth the grader compares with
    solution: str
    subject: str
    level: str
    source: str  # the data source kind it came from (synthetic, jsonl, parquet, hf)


@dataclass(frozen=True)
class SFTTrace:
    """An SFT example: a row of `data/prepared/sft.parquet` and `data/sft/filtered.parquet`."""

    unique_id: str
    prompt: str
    response: str
    ground_truth: str
    subject: str
    level: str
    source: str


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
    token_logprobs: tuple[float, ...] | None = None  # the engine's log-prob of each sampled id, when returned
    strict_reward: float | None = None  # the grader audit's verdicts (a5core.grader.audit); None: not applicable
    verified: float | None = None  # math-verify's verdict on the extracted answer
    audited: bool = False  # the audit judged this sample (False: no audit, or it ran out of time)

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
    ref_log_probs: list[torch.Tensor] | None = None  # per rollout (T_i,), under the frozen reference (grpo.kl_coef)
    keep: torch.Tensor | None = None  # (N,) 0.0 for truncated rollouts (grpo.mask_truncated)
    rollout_log_probs: list[torch.Tensor] | None = None  # per rollout (O_i,), the engine's own (grpo.tis_cap)
    token_advantages: list[torch.Tensor] | None = None  # per rollout (O_i,): REINFORCE++'s with KL in the reward

    def __len__(self) -> int:
        return len(self.output_ids)


PROBLEM_SCHEMA = parquet_schema(Problem)
SFT_SCHEMA = parquet_schema(SFTTrace)
GENERATION_SCHEMA = parquet_schema(GradedSample)
ROLLOUT_SCHEMA = parquet_schema(RoundRollout)
# The type of each column any record has (a name means the same thing in every record type)
COLUMN_TYPES = {f.name: f.type for s in (PROBLEM_SCHEMA, SFT_SCHEMA, GENERATION_SCHEMA, ROLLOUT_SCHEMA) for f in s}


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_string(expected):  # a large_string column (pandas, polars) holds the same text
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    return actual.equals(expected)


def _read_table(path: Path) -> pa.Table:
    if not path.is_file():
        what = "not a file" if path.exists() else "no such file"
        raise DataError(f"{path}: {what}; run the stage that writes it first (`dvc repro` runs them in order)")
    try:
        return pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a truncated or foreign file
        first = str(err).splitlines()[0] if str(err) else ""
        raise DataError(
            f"{path}: not a readable Parquet file ({type(err).__name__}: {first}); rerun the stage that writes it"
        ) from None


def read_rows(path: str | Path, columns: list[str] | tuple[str, ...]) -> list[dict]:
    """The rows of a Parquet file a stage reads, after checking that it has rows, that each of `columns` is there
    with its record type (COLUMN_TYPES) and no nulls, and that unique ids are unique; else a DataError."""
    path = Path(path)
    table = _read_table(path)
    names = table.schema.names
    missing = [c for c in columns if c not in names]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; it has {names}. Rerun the stage that writes it")
    if not table.num_rows:
        raise DataError(f"{path}: no rows; a stage needs at least one (check the data params: n_train, n_validation)")
    for name in columns:
        actual, expected = table.schema.field(name).type, COLUMN_TYPES.get(name)
        if expected is not None and not _same_type(actual, expected):
            raise DataError(f"{path}: column {name!r} is {actual}, expected {expected}. Rerun the stage that writes it")
        nulls = table.column(name).null_count
        if nulls:
            raise DataError(f"{path}: column {name!r} has {nulls} null value(s); every row needs one")
    rows = table.to_pylist()
    if "unique_id" in columns:
        seen: dict[str, int] = {}
        for i, r in enumerate(rows, 1):
            if r["unique_id"] in seen:
                raise DataError(f"{path}: duplicate unique_id {r['unique_id']!r} (rows {seen[r['unique_id']]} and {i})")
            seen[r["unique_id"]] = i
    return rows
