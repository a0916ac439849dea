"""The wall-time forecast (a5core/checks/forecast.py) against hand-computed cases: a stage's last run scaled by its
work, a new run at its family's median rate, a stage with no rate, another machine kind marked, and the GRPO budget's
steps."""

import json

import pytest

from a5core.checks.forecast import budget_steps, family, forecast, records

HERE = "AMD EPYC (avx2)"
MACHINE = {"cpu": "AMD EPYC", "isa": ["avx2"]}
PARAMS = {
    "data": {"n_validation": 0},
    "validation": {"samples_per_example": 1, "max_tokens": 10},
    "grpo": {"n_grpo_steps": 4, "rollout_batch_size": 8, "max_tokens": 10, "epochs_per_rollout_batch": 1},
    "grpo_runs": {"a": {}, "b": {"n_grpo_steps": 2}, "new": {}},
}


def _lock(steps: int) -> dict:
    grpo = {**PARAMS["grpo"], "n_grpo_steps": steps}
    return {"stages": {f"grpo@{r}": {"params": {"params.yaml": {"grpo": grpo, f"grpo_runs.{r}": {}}}} for r in "ab"}}


def test_a_stage_scales_its_last_run_and_a_new_run_takes_the_family_median():
    recorded = {
        "grpo@a": {"duration_s": 100.0, "machine": MACHINE},  # ran 2 steps of 8 x 10 x 2 tokens: 0.3125 s/token
        "grpo@b": {"duration_s": 60.0, "machine": MACHINE},  # 2 steps: 0.1875 s/token
        "fetch_model": {"duration_s": 7.0, "machine": MACHINE},
    }
    stages = ["fetch_model", "check_params", "grpo@a", "grpo@b", "grpo@new", "baseline_eval"]
    rows = {r["stage"]: r for r in forecast(stages, PARAMS, _lock(2), recorded, HERE)}
    assert rows["fetch_model"]["seconds"] == 7.0 and rows["check_params"]["seconds"] is None
    assert rows["grpo@a"]["seconds"] == pytest.approx(200.0)  # now 4 steps: twice the work
    assert rows["grpo@b"]["seconds"] == pytest.approx(60.0)  # 2 steps, as it ran
    assert rows["grpo@new"]["seconds"] == pytest.approx((0.3125 + 0.1875) / 2 * 640)  # the median of two rates
    assert rows["baseline_eval"]["seconds"] is None and "no rate" in rows["baseline_eval"]["source"]
    assert not any("another" in r["source"] for r in rows.values())


def test_another_machine_kind_is_marked_and_calibrated_by_a_family_run_on_both():
    intel = {"cpu": "Intel", "isa": []}
    recorded = {
        "grpo@a": {"duration_s": 100.0, "machine": MACHINE},  # here: 0.3125 s/token
        "grpo@b": {"duration_s": 50.0, "machine": intel},  # elsewhere: 0.15625 s/token, so here is 2x slower
        "sft@x": {"duration_s": 30.0, "machine": intel},  # only elsewhere: scaled by the grpo family's 2x
    }
    params = {**PARAMS, "sft": {"epochs": 1}, "sft_runs": {"x": {"examples": 3}}, "data": {"n_validation": 0}}
    rows = {r["stage"]: r for r in forecast(["grpo@b", "sft@x", "grpo@new"], params, _lock(2), recorded, HERE)}
    assert rows["grpo@b"]["seconds"] == pytest.approx(100.0) and "x2.00" in rows["grpo@b"]["source"]
    assert rows["sft@x"]["seconds"] == pytest.approx(60.0) and "from 1 families" in rows["sft@x"]["source"]
    assert rows["grpo@new"]["seconds"] == pytest.approx(0.3125 * 640)  # this kind's rate alone
    alone = {k: v for k, v in recorded.items() if k != "grpo@a"}  # no family ran on both: marked, not scaled
    row = forecast(["grpo@b"], params, _lock(2), alone, HERE)[0]
    assert row["seconds"] == pytest.approx(50.0) and row["source"].endswith("(another machine kind)")


def test_the_budget_buys_steps_at_the_forecast_seconds_per_step():
    rows = [{"stage": "grpo@a", "seconds": 200.0}, {"stage": "grpo@b", "seconds": None}]
    params = {**PARAMS, "grpo": {**PARAMS["grpo"], "time_budget_s": 120}}
    assert budget_steps(rows, params) == {"grpo@a": pytest.approx(2.4)}  # 50 s per step
    assert budget_steps(rows, PARAMS) == {}


def test_stage_names_and_records(tmp_path):
    assert family("ei_round_3@G4") == ("ei_round", "G4") and family("plots") == ("plots", "")
    assert family("grpo_replicate@lr_1e-5-2") == ("grpo", "lr_1e-5")  # a seed replicate: its run's work
    assert family("ei_replicate_3@G4-1") == ("ei_round", "G4") and family("sft_replicate@full-2") == ("sft", "full")
    (tmp_path / "grpo" / "a").mkdir(parents=True)
    (tmp_path / "grpo" / "a" / "run_record.json").write_text(json.dumps({"stage": "grpo@a", "duration_s": 3.0}))
    collected = tmp_path / "run_records.json"  # the plots stage's committed copy: what a fresh clone has
    collected.write_text(json.dumps([{"stage": "grpo@a", "duration_s": 9.0}, {"stage": "sft@b", "duration_s": 2.0}]))
    assert records(tmp_path, tmp_path / "none.json") == {"grpo@a": {"stage": "grpo@a", "duration_s": 3.0}}
    assert records(tmp_path, collected) == {
        "grpo@a": {"stage": "grpo@a", "duration_s": 3.0},  # the stage's own record wins over the copy
        "sft@b": {"stage": "sft@b", "duration_s": 2.0},
    }


def test_the_summary_line_puts_the_forecast_beside_the_run_records():
    from a5core.checks.forecast import forecast_vs_actual

    saved = {"made_utc": "2026-12-02T07:00:00+00:00", "machine": HERE, "stages": {"a": 600.0, "b": 300.0, "c": None}}
    after, before = {"finished_utc": "2026-12-02T08:00:00+00:00"}, {"finished_utc": "2026-12-02T06:59:59+00:00"}
    took = [{"stage": "a", "duration_s": 900.0, **after}, {"stage": "b", "duration_s": 450.0, **after}]
    took += [{"stage": "z", "duration_s": 5, **after}, {"stage": "c", "duration_s": 7, **after}]
    line = forecast_vs_actual(saved, took)
    assert "15.0 min for 2 stages; their last runs took 22.5 min (1.50 x the forecast)" in line
    # a record older than the forecast (a stage that did not run since) is not compared
    line = forecast_vs_actual(saved, [took[0], {"stage": "b", "duration_s": 450.0, **before}])
    assert "10.0 min for 1 stages; their last runs took 15.0 min (1.50 x the forecast)" in line
    assert forecast_vs_actual(saved, []) == ""


def test_dvc_lock_is_read_as_dvc_writes_it(tmp_path):
    """DVC writes dvc.lock in YAML 1.2, where `off` is a string: read as YAML 1.1 it is False, and the pipeline
    line would count every stage that lists `model.autocast: 'off'` as changed."""
    from a5core.checks.forecast import _changed, read_lock

    lock = tmp_path / "dvc.lock"
    lock.write_text(
        "stages:\n  s:\n    params:\n      params.yaml:\n        model.autocast: off\n        grpo.lr: 1e-05\n"
    )
    assert read_lock(lock)["stages"]["s"]["params"]["params.yaml"]["model.autocast"] == "off"
    params = {"model": {"autocast": "off"}, "grpo": {"lr": 1e-5}}
    assert not _changed("s", params, read_lock(lock)) and _changed(
        "s", {**params, "grpo": {"lr": 3e-6}}, read_lock(lock)
    )
    assert read_lock(tmp_path / "none.lock") == {}
