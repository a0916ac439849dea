"""Hostile-inputs sweep: malformed params files and data files, as a new user brings them, through the stages.

    python -m bench.hostile_sweep [--out reports/hostile_sweep.json]

In a smoke-profile copy of the repo: every data case of tests/support/hostile_inputs.py as `data.source` /
`data.sft_source` of the real `prepare_math` command, every prepared-Parquet case as the input of the real command of
each stage that reads it, and a grid of bad params values (every leaf of every section set to null, a list and a wrong
string; every section missing; structural damage; run names that climb out; nonexistent init_policy; callables that are
no reward function) through `check_params`, the stage every other stage is downstream of (a ConfigError there is the
stage's clean refusal; any other exception would be its traceback). Counts: refused in one line, tracebacks, accepted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from a5core.checks.params import check_params
from a5core.config.sections import ConfigError, read_params
from tests.support.hostile_inputs import GOOD_PROBLEM, GOOD_SFT, PARQUET_SOURCES, PREPARED, PROBLEM_FILES, SFT_FILES
from tests.support.workspace import command, replaced, workspace

LEGAL = {"model.gguf_file"}  # read for pypi: sources only; the smoke profile's model is random:tiny


def classify(r) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    if "Traceback" in r.stderr:
        return "traceback"
    return "refused" if r.returncode != 0 and len(errors) == 1 else "accepted"


def data_cases(work: Path, run) -> list[tuple[str, str]]:
    (work / "ok.jsonl").write_bytes(GOOD_PROBLEM + GOOD_PROBLEM.replace(b"p1", b"p2").replace(b"1+1", b"3+3"))
    (work / "ok_sft.jsonl").write_bytes(GOOD_SFT)
    cases = [(n, f, c, False) for n, f, c, _ in PROBLEM_FILES] + [(n, f, c, True) for n, f, c, _ in SFT_FILES]
    for name, columns, _ in PARQUET_SOURCES:
        buf = pa.BufferOutputStream()
        pq.write_table(pa.table(columns), buf)
        cases.append((name, "m.parquet", buf.getvalue().to_pybytes(), False))
    out = []
    for name, file, content, sft in [
        *cases,
        ("a folder as source", "folder", None, False),
        ("nonexistent", "no.jsonl", None, False),
    ]:
        path = work / file
        if content is not None:
            path.write_bytes(content)
        elif file == "folder":
            path.mkdir(exist_ok=True)
        kind = "parquet" if file.endswith(".parquet") else "jsonl"
        data = {"source": "jsonl:ok.jsonl", "sft_source": f"{kind}:{file}"} if sft else {"source": f"{kind}:{file}"}
        params = read_params(work / "params.yaml")
        params["data"].update({"sft_source": "jsonl:ok_sft.jsonl", "n_validation": 1, **data})
        (work / "bad.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        out.append((f"data: {name}", classify(run(*command(work, "prepare_math", "bad.yaml")))))
    return out


READERS = [  # (stage, input it reads, shape of its rows)
    ("baseline_eval", "data/prepared/validation.parquet", "problem"),
    ("ei_round_1@G2", "data/prepared/train.parquet", "problem"),
    ("grpo@reinforce_baseline", "data/prepared/train.parquet", "problem"),
    ("grpo@no_baseline", "data/prepared/validation.parquet", "problem"),
    ("sft@8", "data/prepared/sft.parquet", "sft"),
    ("filter_sft_data", "data/prepared/sft.parquet", "sft"),
]
SFT_PREPARED = [
    ("no response column", {"unique_id": ["a"], "prompt": ["q"]}),
    ("null prompt", {"unique_id": ["a", "b"], "prompt": ["q", None], "response": ["r", "r"]}),
    ("int response", {"unique_id": ["a"], "prompt": ["q"], "response": [3]}),
    ("zero rows", {"unique_id": [], "prompt": [], "response": []}),
    ("truncated Parquet", b"PAR1\x15\x04"),
]


def prepared_cases(work: Path, run) -> list[tuple[str, str]]:
    out = []
    for stage_name, path, shape in READERS:
        cases = [(n, c) for n, c, _ in PREPARED] if shape == "problem" else SFT_PREPARED
        for name, content in cases:
            with replaced(work / path, content):
                out.append((f"{stage_name} {path}: {name}", classify(run(*command(work, stage_name)))))
    return out


def _edits(base: dict):
    for section, values in base.items():
        yield f"missing section {section}", lambda p, s=section: p.pop(s)
        leaves = values.items() if isinstance(values, dict) and not section.endswith("_runs") else []
        for key, value in leaves:
            for bad in (None, [1], "-bogus" if isinstance(value, str) else "bogus"):
                yield f"{section}.{key} = {bad!r}", lambda p, s=section, k=key, b=bad: p[s].update({k: b})
    yield "unknown section", lambda p: p.update(grpo_typo={})
    yield "unknown key", lambda p: p["grpo"].update(learnin_rate=1e-5)
    yield "section not a mapping", lambda p: p.update(grpo=[1, 2])
    for name in ("x/../../../victim", "../up", "a b", ".hidden", "/abs"):
        yield f"grpo_runs key {name!r}", lambda p, n=name: p["grpo_runs"].update({n: {}})
    yield "ei_runs entry not a mapping", lambda p: p["ei_runs"].update(G2=[1])
    yield "init_policy per run", lambda p: p["grpo_runs"].update(x={"init_policy": "base"})
    for section in ("ei", "grpo"):
        yield f"{section}.init_policy nonexistent", lambda p, s=section: p[s].update(init_policy="does_not_exist")
    for fn in ("os:system", "builtins:max", "a5core.grader:grade", "a5core.grader.reward:boxed_contents"):
        yield f"validation.reward_fn {fn}", lambda p, f=fn: p["validation"].update(reward_fn=f)
    yield "data.source a folder", lambda p: p["data"].update(source="jsonl:data", sft_source="jsonl:ok_sft.jsonl")
    yield "data.source nonexistent", lambda p: p["data"].update(source="jsonl:/nonexistent.jsonl", sft_source="jsonl:x")


def params_cases(work: Path) -> list[tuple[str, str]]:
    base = read_params(work / "params.yaml")
    texts = {"empty file": "", "a list": "- 1\n", "invalid YAML": "grpo: [\n", "duplicate key": "a: 1\na: 2\n"}
    out = []
    cases = [(n, t, None) for n, t in texts.items()] + [(n, None, e) for n, e in _edits(base)]
    for name, text, edit in cases:
        if edit is not None:
            params = json.loads(json.dumps(base))
            edit(params)
            text = yaml.safe_dump(params, sort_keys=False)
        (work / "bad.yaml").write_text(text)
        try:
            check_params(work / "bad.yaml")
            verdict = "legal" if name.split(" = ")[0] in LEGAL else "accepted"
        except ConfigError:
            verdict = "refused"
        except Exception as err:  # the stage would print a traceback
            verdict = f"traceback ({type(err).__name__})"
        out.append((f"params: {name}", verdict))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write every case and its verdict here (JSON)")
    args = ap.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work, run = workspace(Path(tmp))
        results = params_cases(work) + data_cases(work, run) + prepared_cases(work, run)
    counts: dict[str, int] = {}
    for _, verdict in results:
        counts[verdict.split(" ")[0]] = counts.get(verdict.split(" ")[0], 0) + 1
    for name, verdict in results:
        if verdict != "refused":
            print(f"{verdict:>10}  {name}")
    print(f"{len(results)} hostile inputs in {time.monotonic() - start:.0f} s: {counts}")
    if args.out:
        Path(args.out).write_text(json.dumps({"counts": counts, "cases": results}, indent=1) + "\n")
    sys.exit(1 if counts.get("traceback") or counts.get("accepted") else 0)


if __name__ == "__main__":
    main()
