"""Readers for MATH-format, GSM8K-format and handout-SFT-format files into the project's row schemas.

Every error names the file, the line (1-based, for JSONL) and the field. Schemas:
- problems: unique_id, problem, answer, solution, subject, level, source
- sft: unique_id, prompt, response, ground_truth (+ subject, level, source)
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from a5core.grader.reward import boxed_contents

PROBLEM_SCHEMA = pa.schema([(n, pa.string()) for n in ("unique_id", "problem", "answer", "solution", "subject", "level", "source")])
SFT_SCHEMA = pa.schema([(n, pa.string()) for n in ("unique_id", "prompt", "response", "ground_truth", "subject", "level", "source")])


class DataError(ValueError):
    """Bad input data; the message names file, line and field."""


def read_records(spec: str) -> tuple[str, list[tuple[int, dict]]]:
    """`jsonl:<path>` / `parquet:<path>` / `hf:<name>[:<config>]:<split>` -> (label, [(line, record)])."""
    kind, _, rest = spec.partition(":")
    if kind == "jsonl":
        return rest, list(_read_jsonl(Path(rest)))
    if kind == "parquet":
        if not Path(rest).exists():
            raise DataError(f"{rest}: no such file")
        return rest, [(i + 1, r) for i, r in enumerate(pq.read_table(rest).to_pylist())]
    if kind == "hf":
        return rest, _read_hf(rest)
    raise DataError(f"unknown data source {spec!r}: use synthetic, jsonl:<path>, parquet:<path> or hf:<name>[:<config>]:<split>")


def _read_jsonl(path: Path):
    if not path.exists():
        raise DataError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
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
    parts = spec.split(":")
    name, config, split = parts[0], (parts[1] if len(parts) == 3 else None), parts[-1]
    try:
        import datasets  # optional extra: pip install -e .[data]
    except ImportError as e:
        raise DataError("hf: data sources need the `datasets` package (pip install -e '.[data]')") from e
    ds = datasets.load_dataset(name, config, split=split)
    return [(i + 1, dict(r)) for i, r in enumerate(ds)]


def _field(label: str, line: int, rec: dict, *names: str, required: bool = True) -> str | None:
    for n in names:
        if n in rec and rec[n] is not None and str(rec[n]).strip() != "":
            return str(rec[n])
    if required:
        raise DataError(f"{label}:{line}: missing or empty field {' / '.join(names)!r}")
    return None


def to_problem(label: str, line: int, rec: dict, source: str) -> dict:
    """One MATH- or GSM8K-format record -> a problem row."""
    if "question" in rec and "problem" not in rec:  # GSM8K: answer ends in '#### <number>'
        full = _field(label, line, rec, "answer")
        if "####" not in full:
            raise DataError(f"{label}:{line}: field 'answer' has no '#### <number>' final answer (GSM8K format)")
        answer = full.rsplit("####", 1)[1].strip().replace(",", "")
        return {"unique_id": str(rec.get("unique_id") or f"{source}/{line:06d}"), "problem": _field(label, line, rec, "question"),
                "answer": answer, "solution": full.rsplit("####", 1)[0].strip(), "subject": "gsm8k", "level": "", "source": source}
    problem = _field(label, line, rec, "problem")
    solution = _field(label, line, rec, "solution", required=False) or ""
    answer = _field(label, line, rec, "answer", required=False)
    if answer is None:
        boxes = boxed_contents(solution)
        if not boxes:
            raise DataError(f"{label}:{line}: empty field 'answer' and no \\boxed{{}} in 'solution'")
        answer = boxes[-1]
    return {"unique_id": str(rec.get("unique_id") or f"{source}/{line:06d}"), "problem": problem, "answer": answer,
            "solution": solution, "subject": str(rec.get("subject") or rec.get("type") or ""),
            "level": str(rec.get("level") or ""), "source": source}


def to_sft(label: str, line: int, rec: dict, source: str) -> dict:
    """One handout-format SFT record {prompt, response[, ground_truth]} -> an SFT row."""
    response = _field(label, line, rec, "response")
    gt = _field(label, line, rec, "ground_truth", "answer", required=False)
    if gt is None:
        boxes = boxed_contents(response)
        m = re.search(r"<answer>(.*?)</answer>", response, re.S)
        gt = boxes[-1] if boxes else (m.group(1).strip() if m else "")
    return {"unique_id": str(rec.get("unique_id") or f"{source}/{line:06d}"), "prompt": _field(label, line, rec, "prompt"),
            "response": response, "ground_truth": gt, "subject": str(rec.get("subject") or ""),
            "level": str(rec.get("level") or ""), "source": source}


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
