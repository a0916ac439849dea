"""How many answers need `a5core.grader.latex_gate` (math-verify's LaTeX parser behind its screen)?

    python -m bench.latex_gate_share --jsonl /path/to/math500.jsonl --jsonl /path/to/gsm8k_test.jsonl \
        --out reports/latex_gate.json

- Ground truths: each answer is split as the grader splits it (tuples, sets, lists, matrices) and every scalar
  part is classified: `text` (compared by text only: relations, words, infinity), `safe` (our parser reads it),
  `latex` (only latex2sympy, behind the gate, reads it) or `unread` (neither: compared by text only). An answer
  needs the gate when one of its parts is `latex`. Sources: every `--jsonl` file (`answer`, or GSM8K's text after
  `####`) and the DAG's prepared parquet files (the synthetic set).
- Decisions: every pair of the grader's case tables (tests/support/grader_cases.py) is graded with the gate on and off
  (`parse_latex` replaced by a refusal); the pairs whose verdict flips are listed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from a5core.grader import equivalence as eq  # noqa: E402
from a5core.grader.bounds import Rejected  # noqa: E402
from a5core.grader.normalize import prepare  # noqa: E402
from a5core.grader.parse import Unparsable, parse_math  # noqa: E402
from a5core.grader.reward import GroundTruthError, _match_any, _prepared_gts, check_ground_truth  # noqa: E402

TABLES = ("EQUIV", "NOTATION", "UNIVERSAL", "REDTEAM_DIFFERENT", "REDTEAM_EQUAL")


def _parts(s: str) -> list[str]:
    kind, items = eq.structure(s)
    if kind == "scalar":
        return [s]
    if "matrix" in kind.lower():  # rows of cells, compared cell by cell
        items = [cell.strip() for row in items for cell in row.split("&")]
    return [leaf for item in items for leaf in _parts(item)]


def classify(part: str) -> str:
    """`text`, `safe`, `latex` or `unread` for one scalar part of a normalized answer."""
    c = eq.compact(part)
    if "\\infty" in part or eq._TEXT_ONLY.search(part) or (len(c) >= 2 and c.isascii() and c.isalpha()):
        return "text"
    try:
        parse_math(part)
        return "safe"
    except (Unparsable, Rejected):
        pass
    try:
        eq.parse_latex(part)
        return "latex"
    except (Unparsable, Rejected):
        return "unread"


def ground_truth_shares(answers: list[str]) -> dict:
    counts, parts, needing = Counter(), Counter(), []
    for raw in answers:
        try:
            gt = check_ground_truth(raw)
        except GroundTruthError:
            counts["refused"] += 1
            continue
        kinds = [classify(p) for p in _parts(gt)]
        parts.update(kinds)
        counts["answers"] += 1
        if "latex" in kinds:
            needing.append(raw)
    return {
        "answers": counts["answers"],
        "refused": counts["refused"],
        "parts": dict(parts),
        "need_latex_gate": len(needing),
        "examples": needing,
    }


def _jsonl_answers(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [str(r["answer"]).split("####")[-1].strip() for r in rows]


def _parquet_answers(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    column = "answer" if "answer" in names else "ground_truth"
    return [str(a) for a in pq.read_table(path, columns=[column]).column(column).to_pylist()]


def _verdict(ans: str, gt: str) -> bool:
    try:
        pred = prepare(ans)
    except Rejected:
        return False
    return bool(pred) and _match_any(pred, _prepared_gts(gt))[0]


def _refuse(_s: str):
    raise Unparsable("latex gate off")


def flipped_pairs() -> dict:
    """Case-table pairs whose verdict changes when the gate is off."""
    from tests.support import grader_cases

    pairs = [(row[0], row[1]) for name in TABLES for row in getattr(grader_cases, name)]
    on = [_verdict(a, g) for a, g in pairs]
    real, eq.parse_latex = eq.parse_latex, _refuse
    eq.to_expr.cache_clear()
    try:
        off = [_verdict(a, g) for a, g in pairs]
    finally:
        eq.parse_latex = real
        eq.to_expr.cache_clear()
    flips = [
        {"answer": a, "ground_truth": g, "gate_on": x, "gate_off": y} for (a, g), x, y in zip(pairs, on, off) if x != y
    ]
    return {"pairs": len(pairs), "flipped": len(flips), "flips": flips}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", type=Path, action="append", default=[], help="MATH/GSM8K-layout file (answer field)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sources = {p.name: _jsonl_answers(p) for p in args.jsonl}
    for p in sorted((ROOT / "data" / "prepared").glob("*.parquet")):
        sources[f"synthetic {p.name}"] = _parquet_answers(p)
    result = {
        "ground_truths": {name: ground_truth_shares(a) for name, a in sources.items()},
        "case_tables": flipped_pairs(),
    }
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    for name, r in result["ground_truths"].items():
        print(f"{name}: {r['need_latex_gate']}/{r['answers']} answers need the gate; parts {r['parts']}")
    c = result["case_tables"]
    print(f"case tables: {c['flipped']}/{c['pairs']} verdicts flip with the gate off")


if __name__ == "__main__":
    main()
