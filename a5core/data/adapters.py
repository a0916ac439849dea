"""Readers for MATH-format, GSM8K-format and handout-SFT-format files into the project's row schemas.

Data files are untrusted input: every error names the file, the line (1-based, for JSONL; the row for Parquet and
the hub) and the field. Text fields must be strings; answers may be strings or numbers (an integer-valued number
becomes its integer digits, others their shortest repr; NaN, infinities, booleans, lists and dicts are refused); an
SFT record needs a ground truth (its own field, or a \\boxed{} / <answer> in the response); files and fields have size
caps (MAX_FILE_BYTES, MAX_FIELD_CHARS). Schemas:
- problems (a5core.base.records.Problem): unique_id, problem, answer, solution, subject, level, source
- sft (a5core.base.records.SFTTrace): unique_id, prompt, response, ground_truth (+ subject, level, source)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq

from a5core.base.records import PROBLEM_SCHEMA, SFT_SCHEMA, DataError  # the row types (Problem, SFTTrace) live there
from a5core.grader.reward import boxed_contents

__all__ = ["PROBLEM_SCHEMA", "SFT_SCHEMA", "DataError", "load_problems", "load_sft"]


MAX_FILE_BYTES = 2 * 1024**3  # a JSONL/Parquet data file
MAX_FIELD_CHARS = {
    "problem": 20_000,
    "solution": 50_000,
    "answer": 1_000,
    "prompt": 50_000,
    "response": 200_000,
    "ground_truth": 1_000,
}


def _check_file(path: Path) -> None:
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if not path.is_file():
        raise DataError(
            f"{path}: not a file (a {'folder' if path.is_dir() else 'special file'}); give the data file itself"
        )
    if path.stat().st_size > MAX_FILE_BYTES:
        raise DataError(f"{path}: {path.stat().st_size} bytes, over the {MAX_FILE_BYTES}-byte cap for a data file")


def read_records(spec: str) -> tuple[str, list[tuple[int, dict]]]:
    """`jsonl:<path>` / `parquet:<path>` / `hf:<name>[:<config>]:<split>` -> (label, [(line, record)])."""
    kind, _, rest = spec.partition(":")
    if kind == "jsonl":
        return rest, list(_read_jsonl(Path(rest)))
    if kind == "parquet":
        _check_file(Path(rest))
        try:
            table = pq.read_table(rest)
        except Exception as err:  # pyarrow raises several types for a damaged or foreign file
            raise DataError(f"{rest}: not a readable Parquet file ({type(err).__name__}: {err})") from None
        return rest, [(i + 1, r) for i, r in enumerate(table.to_pylist())]
    if kind == "hf":
        return rest, _read_hf(rest)
    raise DataError(
        f"unknown data source {spec!r}: use synthetic, jsonl:<path>, parquet:<path> or hf:<name>[:<config>]:<split>"
    )


def _read_jsonl(path: Path):
    _check_file(path)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}:{lineno}: not valid UTF-8 (byte {e.start}: {raw[e.start : e.start + 4]!r})"
                ) from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: malformed JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            yield lineno, rec


def _read_hf(spec: str) -> list[tuple[int, dict]]:
    """`<name>[:<config>]:<split>[@<revision>]` from the Hugging Face Hub (a revision pins the dataset's commit)."""
    spec, _, revision = spec.partition("@")
    parts = spec.split(":")
    name, config, split = parts[0], (parts[1] if len(parts) == 3 else None), parts[-1]
    try:
        import datasets  # optional extra: pip install -e .[data]
    except ImportError as e:
        raise DataError("hf: data sources need the `datasets` package (pip install -e '.[data]')") from e
    ds = datasets.load_dataset(name, config, split=split, revision=revision or None)
    return [(i + 1, dict(r)) for i, r in enumerate(ds)]


def _as_text(label: str, line: int, name: str, value, numbers: bool) -> str:
    """A field's value as text: strings as they are; numbers (answers only) in canonical form; anything else refused."""
    if isinstance(value, str):
        text = value
    elif numbers and isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif numbers and isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(
                f"{label}:{line}: field {name!r} is {value!r}; an answer must be a finite number or a string"
            )
        text = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    else:
        kind = "a number or a string" if numbers else "a string"
        raise DataError(
            f"{label}:{line}: field {name!r} must be {kind}, got {type(value).__name__} {str(value)[:60]!r}"
        )
    cap = MAX_FIELD_CHARS.get(name)
    if cap and len(text) > cap:
        raise DataError(f"{label}:{line}: field {name!r} has {len(text)} characters, over its cap of {cap}")
    return text


def _field(label: str, line: int, rec: dict, *names: str, required: bool = True, numbers: bool = False) -> str | None:
    for n in names:
        if n in rec and rec[n] is not None:
            text = _as_text(label, line, n, rec[n], numbers)
            if text.strip():
                return text
    if required:
        raise DataError(f"{label}:{line}: missing or empty field {' / '.join(names)!r}")
    return None


def _meta(label: str, line: int, rec: dict, *names: str, default: str = "") -> str:
    """A short identifier field (unique_id, subject, level): a string or an integer, at most 200 characters."""
    for n in names:
        value = rec.get(n)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise DataError(f"{label}:{line}: field {n!r} must be a string or an integer, got {type(value).__name__}")
        if len(str(value)) > 200:
            raise DataError(f"{label}:{line}: field {n!r} is longer than 200 characters")
        return str(value)
    return default


def to_problem(label: str, line: int, rec: dict, source: str) -> dict:
    """One MATH- or GSM8K-format record -> a problem row."""
    if "question" in rec and "problem" not in rec:  # GSM8K: answer ends in '#### <number>'
        full = _field(label, line, rec, "answer", numbers=True)
        if "####" not in full:
            raise DataError(f"{label}:{line}: field 'answer' has no '#### <number>' final answer (GSM8K format)")
        answer = full.rsplit("####", 1)[1].strip().replace(",", "")
        return {
            "unique_id": _meta(label, line, rec, "unique_id", default=f"{source}/{line:06d}"),
            "problem": _field(label, line, rec, "question"),
            "answer": answer,
            "solution": full.rsplit("####", 1)[0].strip(),
            "subject": "gsm8k",
            "level": "",
            "source": source,
        }
    problem = _field(label, line, rec, "problem")
    solution = _field(label, line, rec, "solution", required=False) or ""
    answer = _field(label, line, rec, "answer", required=False, numbers=True)
    if answer is None:
        boxes = boxed_contents(solution)
        if not boxes:
            raise DataError(f"{label}:{line}: empty field 'answer' and no \\boxed{{}} in 'solution'")
        answer = boxes[-1]
    return {
        "unique_id": _meta(label, line, rec, "unique_id", default=f"{source}/{line:06d}"),
        "problem": problem,
        "answer": answer,
        "solution": solution,
        "subject": _meta(label, line, rec, "subject", "type"),
        "level": _meta(label, line, rec, "level"),
        "source": source,
    }


def to_sft(label: str, line: int, rec: dict, source: str) -> dict:
    """One handout-format SFT record {prompt, response[, ground_truth]} -> an SFT row."""
    response = _field(label, line, rec, "response")
    gt = _field(label, line, rec, "ground_truth", "answer", required=False, numbers=True)
    if gt is None:
        boxes = boxed_contents(response)
        body = response.split("<answer>")[-1].split("</answer>")[0].strip() if "</answer>" in response else ""
        gt = boxes[-1] if boxes else body
    if not gt:
        raise DataError(
            f"{label}:{line}: no ground truth: give a 'ground_truth' field (or a \\boxed{{}} or "
            "<answer>...</answer> in the response), so that traces can be filtered by correctness"
        )
    return {
        "unique_id": _meta(label, line, rec, "unique_id", default=f"{source}/{line:06d}"),
        "prompt": _field(label, line, rec, "prompt"),
        "response": response,
        "ground_truth": gt,
        "subject": _meta(label, line, rec, "subject"),
        "level": _meta(label, line, rec, "level"),
        "source": source,
    }


def check_unique_ids(label: str, rows: list[dict]) -> None:
    seen: dict[str, int] = {}
    for i, r in enumerate(rows, 1):
        if r["unique_id"] in seen:
            raise DataError(f"{label}: duplicate unique_id {r['unique_id']!r} (records {seen[r['unique_id']]} and {i})")
        seen[r["unique_id"]] = i


def _load(spec: str, convert) -> list[dict]:
    label, recs = read_records(spec)
    rows = [convert(label, line, rec, spec.split(":")[0]) for line, rec in recs]
    if not rows:
        raise DataError(f"{label}: no records")
    check_unique_ids(label, rows)
    return rows


def load_problems(spec: str) -> list[dict]:
    """MATH- or GSM8K-format records -> problem rows (checked, unique ids)."""
    return _load(spec, to_problem)


def load_sft(spec: str) -> list[dict]:
    """Handout-format SFT records -> SFT rows (checked, unique ids)."""
    return _load(spec, to_sft)
