"""GRPO params a run does not read (a5core/checks/unread.py, issue 64): each rule by hand, the notes against a
recorded dvc.lock, and the check_params stage printing them before anything runs."""

import subprocess
import sys
from pathlib import Path

from a5core.base.typed import from_dict
from a5core.checks.unread import unread_fields, unread_notes
from a5core.rl.grpo_config import GRPOConfig
from tests.support.profiles import composed_text

ROOT = Path(__file__).resolve().parents[1]


def _cfg(**kw) -> GRPOConfig:
    return from_dict(GRPOConfig, {"n_grpo_steps": 2, **kw})


def test_each_rule_names_the_setting_that_leaves_its_field_unread():
    base = unread_fields(_cfg(loss_type="reinforce_with_baseline"))
    assert set(base) == {"cliprange", "kl_estimator", "max_refill_rounds", "overlong_penalty", "normalize_constant"}
    assert "does not clip" in base["cliprange"]
    on = _cfg(
        loss_type="grpo_clip",
        kl_coef=0.1,
        dynamic_sampling=True,
        overlong_buffer=4,
        max_tokens=16,
        length_normalization="masked_normalize",
        normalize_constant=16.0,
    )
    assert unread_fields(on) == {}  # every field read once its switch is on
    no_std = unread_fields(_cfg(use_std_normalization=False))
    assert no_std["advantage_eps"] == no_std["std_ddof"] == "use_std_normalization is off"
    rloo = unread_fields(_cfg(advantage_estimator="rloo"))
    assert {"use_std_normalization", "advantage_eps", "std_ddof"} <= set(rloo)


def _lock(grpo: dict, runs: dict[str, dict], validation: dict) -> dict:
    stages = {}
    for run, overrides in runs.items():
        params = {"grpo": grpo, "validation": validation}
        if overrides:
            params[f"grpo_runs.{run}"] = overrides
        stages[f"grpo@{run}"] = {"params": {"params.yaml": params}}
    return {"stages": stages}


def test_notes_name_the_unread_changes_and_whether_they_alone_rerun_the_stage():
    grpo = {"n_grpo_steps": 2, "lr": 1e-5, "cliprange": None, "overlong_penalty": 1.0}
    runs = {"plain": {}, "clipped": {"loss_type": "grpo_clip"}}
    lock = _lock(grpo, runs, {"samples_per_example": 2})
    params = {"grpo": {**grpo, "cliprange": 0.3}, "grpo_runs": runs, "validation": {"samples_per_example": 2}}
    (note,) = unread_notes(params, lock)  # the clipped run reads cliprange: no note for it
    assert note.startswith("note: grpo@plain does not read grpo.cliprange (null -> 0.3: loss_type")
    assert note.endswith("so, its code and data unchanged, it reruns to the same training")
    params["grpo"]["lr"] = 3e-6  # a field it reads changed too
    assert unread_notes(params, lock)[0].endswith("its other changes rerun it")
    params["grpo"]["lr"] = 1e-5
    params["validation"] = {"samples_per_example": 4}  # another section it is keyed by changed
    assert unread_notes(params, lock)[0].endswith("its other changes rerun it")
    assert unread_notes(params, {}) == []  # nothing recorded yet: nothing to compare
    params = {"grpo": {**grpo, "lr": 3e-6}, "grpo_runs": runs, "validation": {"samples_per_example": 2}}
    assert unread_notes(params, lock) == []  # only read fields changed


def test_the_check_params_stage_prints_the_note_from_the_recorded_lock(tmp_path):
    smoke = composed_text("smoke")
    (tmp_path / "params.yaml").write_text(smoke)
    changed = smoke.replace("\n  cliprange: null\n", "\n  cliprange: 0.3\n")
    assert changed != smoke
    (tmp_path / "new.yaml").write_text(changed)
    from a5core.base.typed import read_params

    params = read_params(tmp_path / "params.yaml")
    keys = ["grpo", "validation", "generation", "logging", "model", "distributed"]
    stages = {}
    for run, overrides in params["grpo_runs"].items():
        recorded = {k: params[k] for k in keys}
        if overrides:
            recorded[f"grpo_runs.{run}"] = overrides
        stages[f"grpo@{run}"] = {"params": {"params.yaml": recorded}}
    import yaml

    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
    cmd = [sys.executable, str(ROOT / "stages" / "check_params.py"), "--out", str(tmp_path / "out.json")]
    cmd += ["--lock", str(tmp_path / "dvc.lock"), "--params", str(tmp_path / "new.yaml")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    notes = [line for line in out.stdout.splitlines() if line.startswith("note: ")]
    # smoke's runs: reinforce_baseline and no_baseline do not clip; clip_offpolicy (grpo_clip) reads it
    assert [n.split()[1] for n in notes] == ["grpo@reinforce_baseline", "grpo@no_baseline"], out.stdout
    assert all("so, its code and data unchanged, it reruns to the same training" in n for n in notes)
    cmd[cmd.index("--params") + 1] = str(tmp_path / "params.yaml")  # the recorded values: no note
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "note: " not in out.stdout
