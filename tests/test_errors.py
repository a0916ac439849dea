"""Bad input ends in one clear line: each stage's real command from dvc.yaml (smoke profile, in a copy of the repo),
given a bad input of each kind, exits non-zero with one `error:` line that names the file or key, and no traceback;
every input is checked before a model loads (the inputs here fail before any model exists). Unexpected errors keep
their traceback."""

import shlex
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from a5core import stage
from a5core.config import read_params
from a5core.inputs import dag_stages
from a5core.records import PROBLEM_SCHEMA, SFT_SCHEMA, DataError
from tests.hostile_inputs import PREPARED, PROBLEM_FILES, SFT_FILES
from tests.support.repos import scratch_repo

PROBLEM = {"unique_id": "a", "problem": "What is 1+1?", "answer": "2", "solution": "", "subject": "", "level": ""}
TRACE = {"unique_id": "a", "prompt": "Q", "response": "</think> <answer>2</answer>", "ground_truth": "2"}


def _table(row: dict, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{**{n: "" for n in schema.names}, **row}], schema=schema)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return workspace(tmp_path_factory.mktemp("errors"))


def workspace(root: Path):
    """A smoke-profile copy of the repo with valid prepared inputs and placeholder model folders (a config.json:
    enough to pass the folder check; a stage that got as far as loading one would fail with a traceback)."""
    work, run = scratch_repo(root, "smoke")
    for name in ("train", "validation"):
        pq.write_table(_table(PROBLEM, PROBLEM_SCHEMA), work / f"data/prepared/{name}.parquet")
    pq.write_table(_table(TRACE, SFT_SCHEMA), work / "data/prepared/sft.parquet")
    for model in ("base", "sft_filtered"):
        (work / "models" / model).mkdir(parents=True, exist_ok=True)
        (work / "models" / model / "config.json").write_text("{}")
    return work, run


def command(work: Path, name: str, params: str = "params.yaml") -> list[str]:
    """Stage `name`'s cmd from dvc.yaml (foreach entries resolved), reading `params`."""
    for stage_name, body, resolve in dag_stages(read_params(work / "params.yaml"), work):
        if stage_name == name:
            return [sys.executable, *shlex.split(resolve(body["cmd"]))[1:], "--params", params]
    raise KeyError(name)


def one_line_error(r: subprocess.CompletedProcess, *names: str) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(errors) == 1, r.stderr[-3000:]
    assert all(n in errors[0] or n in r.stderr for n in names), (names, r.stderr[-3000:])
    return errors[0]


def bad_params(work: Path, edit) -> str:
    params = read_params(work / "params.yaml")
    edit(params)
    (work / "bad.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return "bad.yaml"


@contextmanager
def replaced(path: Path, content):
    """`path` holds `content` (bytes, or a table as columns -> values) inside the block, its old bytes after."""
    old = path.read_bytes()
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        pq.write_table(pa.table(content), path)
    try:
        yield
    finally:
        path.write_bytes(old)


def test_config_errors_in_the_first_stages(ws):
    work, run = ws
    (work / "empty.yaml").write_text("")
    one_line_error(run(*command(work, "fetch_model", "empty.yaml")), "empty.yaml: empty")
    p = bad_params(work, lambda d: d.pop("validation"))
    one_line_error(run(*command(work, "plots", p)), "missing section 'validation'")
    p = bad_params(work, lambda d: d["grpo_runs"].update({"x/../../../victim": {}}))
    one_line_error(run(*command(work, "check_params", p)), "run name 'x/../../../victim'")


def test_refused_before_any_stage_runs(ws):
    """A nonexistent init_policy and a callable that is no reward function stop the first stage of the DAG."""
    work, run = ws
    p = bad_params(work, lambda d: d["grpo"].update(init_policy="does_not_exist"))
    one_line_error(run(*command(work, "check_params", p)), "grpo.init_policy 'does_not_exist'", "no stage")
    p = bad_params(work, lambda d: d["validation"].update(reward_fn="os:system"))
    one_line_error(run(*command(work, "check_params", p)), "validation.reward_fn 'os:system'", "TypeError")


@pytest.mark.parametrize(
    "case", [PROBLEM_FILES[0], PROBLEM_FILES[9], PROBLEM_FILES[17], SFT_FILES[2]], ids=lambda c: c[0].replace(" ", "-")
)
def test_bad_data_files_in_prepare_math(ws, case):
    work, run = ws
    name, file, content, message = case
    (work / file).write_bytes(content)
    sft = case in SFT_FILES
    (work / "ok_sft.jsonl").write_text(
        '{"prompt": "Q", "response": "</think> <answer>2</answer>", "ground_truth": "2"}'
    )
    (work / "ok.jsonl").write_text('{"problem": "What is 3+4?", "answer": "7"}\n{"problem": "And 1+1?", "answer": "2"}')
    source = {"source": "jsonl:ok.jsonl", "sft_source": f"jsonl:{file}"} if sft else {"source": f"jsonl:{file}"}
    p = bad_params(work, lambda d: d["data"].update({"sft_source": "jsonl:ok_sft.jsonl", **source, "n_validation": 1}))
    one_line_error(run(*command(work, "prepare_math", p)), file, message)
    p = bad_params(work, lambda d: d["data"].update(source="jsonl:/nonexistent.jsonl", sft_source="jsonl:ok_sft.jsonl"))
    one_line_error(run(*command(work, "prepare_math", p)), "data.source 'jsonl:/nonexistent.jsonl'")


@pytest.mark.parametrize(
    "stage_name,path,case",
    [
        ("baseline_eval", "data/prepared/validation.parquet", PREPARED[0]),  # was a failure after the whole eval
        ("baseline_eval", "data/prepared/validation.parquet", PREPARED[5]),
        ("filter_sft_data", "data/prepared/sft.parquet", ("no response", {"unique_id": ["a"]}, "missing column(s)")),
        (
            "sft@8",
            "data/prepared/sft.parquet",
            ("null prompt", {"unique_id": ["a"], "prompt": [None], "response": ["r"]}, "column 'prompt' is null"),
        ),
        ("ei_round_1@G2", "data/prepared/train.parquet", PREPARED[3]),
        ("grpo@reinforce_baseline", "data/prepared/train.parquet", PREPARED[4]),
        ("grpo@no_baseline", "data/prepared/validation.parquet", PREPARED[2]),  # read in training_start
    ],
    ids=["int-answer", "truncated", "no-response", "null-prompt", "zero-rows", "duplicate-ids", "null-problem"],
)
def test_bad_prepared_inputs_stop_each_stage_before_a_model_loads(ws, stage_name, path, case):
    work, run = ws
    _, content, message = case
    with replaced(work / path, content):
        one_line_error(run(*command(work, stage_name)), path, message)


def test_a_missing_input_model_names_the_stage_that_writes_it(ws):
    work, run = ws
    (work / "models/sft_filtered/config.json").rename(work / "models/sft_filtered/config.bak")
    try:
        line = one_line_error(run(*command(work, "grpo@no_baseline")), "models/sft_filtered")
        assert "run `dvc repro sft@filtered` first" in line, line
    finally:
        (work / "models/sft_filtered/config.bak").rename(work / "models/sft_filtered/config.json")


class WeightSyncError(RuntimeError):  # stands in for a5core.generation.vllm's (matched by qualified name)
    pass


WeightSyncError.__module__ = "a5core.generation.vllm"


@pytest.mark.parametrize(
    "err,named",
    [
        (DataError("data/x.parquet: column 'answer' is int64, expected string"), "data/x.parquet"),
        (WeightSyncError("engine parameters differ\nfrom the policy's"), "engine parameters differ; from the"),
    ],
)
def test_project_errors_exit_with_one_line(err, named):
    def main():
        raise err

    with pytest.raises(SystemExit) as exc:
        stage.run(main)
    assert str(exc.value).startswith("error: ") and named in str(exc.value) and "\n" not in str(exc.value)


def test_unexpected_errors_keep_their_traceback():
    def main():
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        stage.run(main)
