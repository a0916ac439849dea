"""Write the full profile's data files in the handout's JSONL layout from public Hugging Face datasets (needs hub access
and `pip install -e '.[data]'`):

    python -m tools.fetch_math --out data/external/math
    python -m tools.fetch_math --out data/external/math --source-dir DIR   # local copies in the Hub's layout

`--source-dir DIR` reads each dataset from `DIR/<owner>/<name>` instead of the Hub: a folder laid out as the dataset's
repository (its README.md `configs:` and parquet files), loaded through the same `datasets.load_dataset`
(tests/test_fetch_math.py runs the tool this way on a small fixture; the revision is then the copy's own).

- train.jsonl / validation.jsonl: MATH (Hendrycks et al., 2021) from `EleutherAI/hendrycks_math` at a pinned commit:
  its seven subject configs, 7,500 train and 5,000 test problems (the handout's "validation" set is the test split),
  fields problem, solution, answer (the last \\boxed{} of the solution), subject, level, unique_id.
- sft.jsonl: R1-style reasoning traces as {prompt, response, ground_truth} in the r1_zero format, from
  `open-r1/OpenR1-Math-220k` (config "default", pinned commit): DeepSeek-R1 generations that math-verify marked
  correct. Its problems come from NuminaMath-1.5, not MATH train (no public set of full-R1 traces on MATH train was
  found); prepare_math removes any trace whose problem is also a validation problem. The course's own sft.jsonl, if
  you have it, can replace this file as it is.
Dataset names, configs and revisions were checked against the dataset cards (docs/full-scale.md).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

MATH = ("EleutherAI/hendrycks_math", "0bd4da3ba883718272d0e821efdf10b63c2ed3bf")
MATH_CONFIGS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
TRACES = ("open-r1/OpenR1-Math-220k", "default", "e4e141ec9dea9f8326f4d347be56105859b2bd68")


def math_rows(load_dataset, split: str) -> list[dict]:
    """Every problem of one MATH split, subject by subject, in the handout's layout."""
    from a5core.grader.reward import boxed_contents

    rows = []
    for config in MATH_CONFIGS:
        for i, r in enumerate(load_dataset(MATH[0], config, split=split, revision=MATH[1])):
            boxes = boxed_contents(r["solution"])
            if boxes:
                rows.append(
                    {
                        "problem": r["problem"],
                        "solution": r["solution"],
                        "answer": boxes[-1],
                        "subject": r["type"],
                        "level": r["level"],
                        "unique_id": f"{split}/{config}/{i}.json",
                    }
                )
    return rows


def trace_rows(load_dataset, max_chars: int, limit: int) -> list[dict]:
    """The first math-verify-correct R1 generation of each problem, as an r1_zero (prompt, response) pair."""
    from a5core.config.prompts import build_prompt

    rows = []
    for r in load_dataset(TRACES[0], TRACES[1], split="train", revision=TRACES[2]):
        for text, ok in zip(r["generations"], r["correctness_math_verify"]):
            match = re.fullmatch(r"\s*<think>(.*?)</think>.*", text, re.S)
            if ok and match and len(match.group(1)) <= max_chars:
                response = f" {match.group(1).strip()} </think> <answer>{r['answer']}</answer>"
                rows.append(
                    {
                        "prompt": build_prompt(r["problem"]),
                        "response": response,
                        "ground_truth": r["answer"],
                        "unique_id": f"openr1/{r['uuid']}",
                    }
                )
                break
        if len(rows) >= limit:
            break
    return rows


def hub_loader(source_dir: str | None):
    """`datasets.load_dataset` for the Hub, or for local copies of its repositories under `source_dir`."""
    from datasets import load_dataset

    if source_dir is None:
        return load_dataset

    def local(name: str, config: str, split: str, revision: str):
        folder = Path(source_dir) / name
        if not folder.is_dir():
            raise SystemExit(f"error: --source-dir has no {folder} (a copy of the Hub's {name} at {revision})")
        return load_dataset(str(folder), config, split=split)

    return local


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{path}: {len(rows)} rows")


def main(argv: list[str] | None = None, load_dataset=None) -> None:
    parser = argparse.ArgumentParser(description="MATH and R1 traces in the handout's JSONL layout")
    parser.add_argument("--out", default="data/external/math")
    parser.add_argument("--sft-max-chars", type=int, default=6000, help="longest reasoning kept (about 1,500 tokens)")
    parser.add_argument("--sft-limit", type=int, default=20000, help="traces written")
    parser.add_argument("--source-dir", help="read DIR/<owner>/<name> (the Hub's layout) instead of the Hub")
    args = parser.parse_args(argv)
    if load_dataset is None:
        load_dataset = hub_loader(args.source_dir)
    out = Path(args.out)
    write_jsonl(math_rows(load_dataset, "train"), out / "train.jsonl")
    write_jsonl(math_rows(load_dataset, "test"), out / "validation.jsonl")
    write_jsonl(trace_rows(load_dataset, args.sft_max_chars, args.sft_limit), out / "sft.jsonl")


if __name__ == "__main__":
    main()
