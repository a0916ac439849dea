"""Artifacts are pure functions of their inputs (issue: reruns that change nothing invalidate nothing): provenance has
no time, commit or host, a rewrite gives the same bytes, protocol hashes come from content, and wall-clock fields
go only to the files DVC ignores. The DAG-level checks (forced reruns, a comment-only edit, a second clone) are in
tests/test_smoke_dag.py::check_reruns_change_nothing."""

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from a5core.base.artifacts import content_hash, provenance, read_provenance, write_parquet
from a5core.base.run_record import read_run_record, write_run_record
from a5core.config.sections import EvalConfig
from a5core.run.history import RunHistory, read_log, read_rows, timing_log
from a5core.stage.training import validation_protocol, write_results
from tests.support.loops import METRICS

ROOT = Path(__file__).resolve().parents[1]
ROWS = [{"unique_id": "a", "problem": "1+1", "answer": "2"}, {"unique_id": "b", "problem": "2+2", "answer": "4"}]


def test_provenance_holds_no_time_commit_or_host(tmp_path):
    src = write_parquet(ROWS, tmp_path / "in.parquet")
    first = provenance("s", {"k": 1}, {"in": src})
    time.sleep(1.1)  # a second later: a time in it would differ
    assert provenance("s", {"k": 1}, {"in": src}) == first
    assert set(first) == {"stage", "params", "inputs"}
    a = write_parquet(ROWS, tmp_path / "a.parquet", first)
    b = write_parquet(ROWS, tmp_path / "b.parquet", provenance("s", {"k": 1}, {"in": src}))
    assert a.read_bytes() == b.read_bytes() and read_provenance(a) == first


def test_protocol_hashes_the_questions_not_the_file_bytes(tmp_path):
    a = write_parquet(ROWS, tmp_path / "a.parquet", {"stage": "x"})
    b = tmp_path / "b.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS).replace_schema_metadata({b"other": b"metadata"}), b)
    assert a.read_bytes() != b.read_bytes()
    cfg = EvalConfig()
    assert validation_protocol(cfg, str(a), False) == validation_protocol(cfg, str(b), False)
    c = write_parquet([ROWS[0], {**ROWS[1], "answer": "5"}], tmp_path / "c.parquet")
    assert validation_protocol(cfg, str(c), False) != validation_protocol(cfg, str(a), False)
    assert validation_protocol(cfg, str(a), False, "question_only") != validation_protocol(cfg, str(a), False)
    assert validation_protocol(cfg, str(a), True) != validation_protocol(cfg, str(a), False)  # another precision
    assert content_hash(ROWS, ["unique_id"]) == content_hash([{**r, "answer": "x"} for r in ROWS], ["unique_id"])


def test_wall_clock_fields_go_to_the_timing_log_only(tmp_path):
    live, logs = tmp_path / "live", tmp_path / "logs"
    with RunHistory(live, logs, name="t", total_steps=2) as history:
        for step in (1, 2):
            row = {"step": step, "train/loss": 0.5 / step, "perf/tokens_per_s": 100.0 + step, "perf/wall_s": step}
            history.log("train", row)
    assert read_log(logs / "train.csv") == [{"step": 1, "train/loss": 0.5}, {"step": 2, "train/loss": 0.25}]
    assert read_log(timing_log(logs, "train"))[1] == {"step": 2, "perf/tokens_per_s": 102.0, "perf/wall_s": 2}
    assert read_rows(logs, "train")[0] == {"step": 1, "train/loss": 0.5, "perf/tokens_per_s": 101.0, "perf/wall_s": 1}
    dvclive_files = [str(p.relative_to(live)) for p in live.rglob("*") if p.is_file()]
    assert "plots/metrics/train/loss.tsv" in dvclive_files
    assert not [f for f in dvclive_files if f.startswith("plots/metrics/perf/")]
    assert "wall_s" not in (live / "metrics.json").read_text()
    assert history.state()["rows"]["train"][0]["perf/wall_s"] == 1  # resume state keeps them (outside DVC)


def test_the_namespace_decides_the_sinks_and_a_bare_name_is_refused(tmp_path):
    """`count/` is bookkeeping (CSV only), every other namespace is a curve; a key without one is an error."""
    live, logs = tmp_path / "live", tmp_path / "logs"
    with RunHistory(live, logs, name="t", total_steps=1) as history:
        history.log("train", {"step": 1, "rollout/reward": 0.5, "count/epoch": 0})
        with pytest.raises(ValueError, match="namespace"):
            history.log("train", {"step": 2, "loss": 0.5})
    assert (live / "plots" / "metrics" / "rollout" / "reward.tsv").exists()
    assert not (live / "plots" / "metrics" / "count").exists()
    assert read_log(logs / "train.csv")[0]["count/epoch"] == 0


def test_results_keep_wall_clock_out_of_details(tmp_path):
    class Final:
        metrics, per_question = METRICS, []

    write_results(tmp_path / "metrics.json", Final(), best_step=3, best_wall_s=12.5)
    details = json.loads((tmp_path / "details.json").read_text())
    assert details["best_step"] == 3 and "best_wall_s" not in details
    assert not (tmp_path / "validation.json").exists()  # only a trained run's results carry it (`protocol`)


def test_a_trained_runs_results_carry_its_validation_per_question(tmp_path):
    """`protocol` writes validation.json beside the metrics: what the seed-replicate intervals read."""

    class Final:
        metrics, per_question, at_k = METRICS, [{"unique_id": "q1", "score": 0.5}], {}

    write_results(tmp_path / "metrics.json", Final(), protocol="64 x 2")
    record = json.loads((tmp_path / "validation.json").read_text())
    assert record == {"protocol": "64 x 2", "metrics": METRICS, "per_question": Final.per_question}


def test_run_records_travel_with_their_stage_and_no_stage_depends_on_them(tmp_path):
    """Each stage's volatile record is a cached output of its own (restored with the stage from DVC's run cache),
    and no stage's deps cover it (a rerun that writes the same artifacts reruns nothing below)."""
    record = read_run_record(write_run_record(tmp_path / "rec", "s", rollout_s=1.0))
    assert {"code_revision", "finished_utc", "duration_s", "machine", "rollout_s"} <= set(record)
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        body = stage.get("do", stage)
        words = body["cmd"].split()
        deps = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
        assert not [d for d in deps if d.startswith("run_records")], name
        if "--record" in words:
            folder = words[words.index("--record") + 1]
            assert folder.startswith("run_records/") and folder in body["outs"], name
    assert "run_record.json" not in (ROOT / ".dvcignore").read_text()  # an ignored file cannot be an output
