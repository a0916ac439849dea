"""Params a GRPO, SFT or EI run does not read (a5core/checks/unread.py, issue 64): each rule by hand, the notes
against a recorded dvc.lock, and the check_params stage printing them before anything runs."""

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


SFT = {"lr": 1e-4, "epochs": 1, "loss_normalization": "token_mean", "normalize_constant": 1.0, "reward_fn": None}


def _sft_params(sft: dict, init_policy: str = "sft_filtered") -> dict:
    runs = {"24": {"examples": 24, "data": "prepared/sft"}, "filtered": {"examples": 0, "data": "sft/filtered"}}
    return {"sft": sft, "sft_runs": runs, "ei": {"init_policy": init_policy, "lr": 1e-5}, "ei_runs": {"G4": {}}}


def _sft_lock(params: dict) -> dict:
    stages = {f"sft@{run}": {"sft": params["sft"], f"sft_runs.{run}": spec} for run, spec in params["sft_runs"].items()}
    stages["ei_round_1@G4"] = {"ei": params["ei"], "ei_runs.G4": {}, "sft": params["sft"]}
    return {"stages": {name: {"params": {"params.yaml": recorded}} for name, recorded in stages.items()}}


def test_sft_notes_say_which_runs_read_the_constant_and_the_filter_reward():
    lock = _sft_lock(_sft_params(SFT))
    notes = unread_notes(_sft_params({**SFT, "normalize_constant": 64.0}), lock)
    # token_mean divides by no constant: no SFT run and no EI round reads it, so each reruns to the same training
    assert [n.split()[1] for n in notes] == ["sft@24", "sft@filtered", "ei_round_*@G4"]
    assert all("loss_normalization token_mean divides by no constant" in n for n in notes)
    assert all(n.endswith("so, its code and data unchanged, it reruns to the same training") for n in notes)
    per_example = {**SFT, "loss_normalization": "per_example"}
    lock = _sft_lock(_sft_params(per_example))
    assert unread_notes(_sft_params({**per_example, "normalize_constant": 64.0}), lock) == []  # read by all
    (sft, ei) = unread_notes(_sft_params({**per_example, "reward_fn": "rewards.examples:answer_only_reward_fn"}), lock)
    # sft@filtered trains on the traces that reward keeps; sft@24 does not, nor does an EI round (ei.reward_fn)
    assert sft.startswith(
        "note: sft@24 does not read sft.reward_fn (null -> rewards.examples:answer_only_reward_fn: filter_sft"
    )
    assert ei.startswith("note: ei_round_*@G4 does not read sft.reward_fn") and "ei.reward_fn" in ei
    assert ei.endswith("its start, models/sft_filtered, is retrained with sft.reward_fn")


def test_ei_notes_name_the_fields_a_round_replaces_and_its_retrained_start():
    lock = _sft_lock(_sft_params(SFT))
    (ei,) = unread_notes(_sft_params({**SFT, "lr": 3e-4, "epochs": 2}), lock)  # both read by the SFT runs
    assert ei.startswith("note: ei_round_*@G4 does not read sft.epochs (1 -> 2: a round's epochs are ei.sft_epochs)")
    assert "sft.lr (0.0001 -> 0.0003: a round's learning rate is ei.lr)" in ei
    assert ei.endswith("its start, models/sft_filtered, is retrained with sft.epochs, sft.lr")
    lock = _sft_lock(_sft_params(SFT, init_policy="base"))  # a start no SFT run trains
    (ei,) = unread_notes(_sft_params({**SFT, "lr": 3e-4}, init_policy="base"), lock)
    assert ei.endswith("so, its code and data unchanged, it reruns to the same training")
    params = _sft_params({**SFT, "lr": 3e-4}, init_policy="base")
    params["ei"] = {**params["ei"], "lr": 3e-5}  # a field the round reads changed too
    assert unread_notes(params, lock)[0].endswith("its other changes rerun it")
    assert unread_notes(_sft_params({**SFT, "warmup_ratio": 0.1}), _sft_lock(_sft_params({**SFT, "warmup_ratio": 0.0})))
    rewarm = _sft_params({**SFT, "warmup_ratio": 0.1})
    rewarm["ei"] = {**rewarm["ei"], "rewarm": True}  # a round warms up again: it reads warmup_ratio
    old = _sft_params({**SFT, "warmup_ratio": 0.0})
    old["ei"] = rewarm["ei"]
    assert unread_notes(rewarm, _sft_lock(old)) == []


def test_the_check_params_stage_prints_the_note_from_the_recorded_lock(tmp_path):
    smoke = composed_text("smoke")
    (tmp_path / "params.yaml").write_text(smoke)
    changed = smoke.replace("\n  cliprange: null\n", "\n  cliprange: 0.3\n")
    changed = changed.replace("\nsft:\n  lr: ", "\nsft:\n  lr: 3.0e-4  # was ")  # read by SFT, not by EI rounds
    assert changed.count("3.0e-4  # was") == 1 and "cliprange: 0.3" in changed
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
    for run in params["sft_runs"]:
        stages[f"sft@{run}"] = {"params": {"params.yaml": {"sft": params["sft"], f"sft_runs.{run}": {}}}}
    for run in params["ei_runs"]:
        recorded = {"ei": params["ei"], f"ei_runs.{run}": {}, "sft": params["sft"]}
        stages[f"ei_round_1@{run}"] = {"params": {"params.yaml": recorded}}
    import yaml

    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
    cmd = [sys.executable, str(ROOT / "stages" / "check_params.py"), "--out", str(tmp_path / "out.json")]
    cmd += ["--lock", str(tmp_path / "dvc.lock"), "--params", str(tmp_path / "new.yaml")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    notes = [line for line in out.stdout.splitlines() if line.startswith("note: ")]
    # smoke's runs: reinforce_baseline and no_baseline do not clip; clip_offpolicy (grpo_clip) reads it
    # smoke's EI run starts from sft_filtered, which reads sft.lr; its SFT runs read it: no note for them
    names = ["grpo@reinforce_baseline", "grpo@no_baseline", "ei_round_*@G2"]
    assert [n.split()[1] for n in notes] == names, out.stdout
    assert all("so, its code and data unchanged, it reruns to the same training" in n for n in notes[:2])
    assert notes[2].endswith("its start, models/sft_filtered, is retrained with sft.lr") and "ei.lr" in notes[2]
    cmd[cmd.index("--params") + 1] = str(tmp_path / "params.yaml")  # the recorded values: no note
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "note: " not in out.stdout


def _section_lock(generation: dict, distributed: dict) -> dict:
    recorded = {"generation": generation, "distributed": distributed}
    stages = {name: {"params": {"params.yaml": recorded}} for name in ("sft@24", "grpo@plain", "check_params")}
    stages["baseline_eval"] = {"params": {"params.yaml": {"generation": generation}}}
    return {"stages": stages}


def test_shared_sections_name_the_vllm_fields_under_hf_and_the_strategy_on_one_process():
    gen = {"backend": "hf", "batch_size": 64, "gpu_memory_utilization": 0.85, "verify_weight_sync": True}
    gen |= {"sync_tolerance": 0.1, "layout": "two_gpu", "cuda_graphs": True, "dtype": "auto"}
    dist = {"nproc": 1, "nnodes": 1, "strategy": "ddp"}
    lock = _section_lock(gen, dist)
    params = {"generation": {**gen, "gpu_memory_utilization": 0.5}, "distributed": {**dist, "strategy": "fsdp2"}}
    generation, distributed = unread_notes(params, lock)
    assert generation == (
        "note: no stage reads generation.gpu_memory_utilization (0.85 -> 0.5: backend hf generates with the policy, "
        "no engine of its own); DVC keys 3 stage(s) by the generation section, so they rerun for it alone"
    )  # check_params, which records the whole file, is not counted
    assert distributed.startswith("note: no stage reads distributed.strategy (ddp -> fsdp2: one process")
    params["generation"]["batch_size"] = 8  # read by the hf backend
    assert unread_notes(params, lock)[0].endswith("so its other changes rerun them")
    vllm = {**gen, "backend": "vllm"}
    lock = _section_lock(vllm, {**dist, "nproc": 2})  # an engine reads them; two processes read the strategy
    params = {"generation": {**vllm, "gpu_memory_utilization": 0.5}, "distributed": {**dist, "nproc": 2}}
    assert unread_notes(params, lock) == []
    (note,) = unread_notes({**params, "generation": {**vllm, "batch_size": 8}}, lock)
    assert "generation.batch_size (64 -> 8: backend vllm's engine batches its requests itself)" in note
    off = {**vllm, "verify_weight_sync": False}
    assert (
        "sync_tolerance"
        in unread_notes({**params, "generation": {**off, "sync_tolerance": 0.2}}, _section_lock(off, dist))[0]
    )
