"""dvc.yaml is honest: each stage depends on exactly the a5core modules its script imports, each params
section is read by the stages that list it, the Expert Iteration rounds form one chain, and the `dvc plots`
definitions name every configured run."""
from pathlib import Path

import yaml

from tests.stage_deps import ROOT, ei_round_block, expected_deps


def _stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _body(stage: dict) -> dict:
    return stage.get("do", stage)


def _script(body: dict) -> str:
    return body["cmd"].split()[1]


def test_each_stage_depends_on_exactly_the_modules_it_imports():
    expected = expected_deps()
    for name, stage in _stages().items():
        body = _body(stage)
        script = _script(body)
        listed = sorted(d for d in body["deps"] if d.startswith("a5core"))
        assert script in body["deps"], f"{name}: its script {script} is not a dep"
        assert listed == expected[script], f"{name}: a5core deps should be {expected[script]} (python -m tests.stage_deps)"


def test_plots_stage_does_not_depend_on_training_code_and_vice_versa():
    deps = {name: _body(s)["deps"] for name, s in _stages().items()}
    assert "a5core/grpo.py" not in deps["plots"] and "a5core/plots.py" not in deps["grpo"]
    assert not any(d in ("a5core", "a5core/") for ds in deps.values() for d in ds)  # no stage depends on the whole library


def test_eval_params_belong_to_the_zero_shot_eval_only():
    for name, stage in _stages().items():
        params = [p.split(".")[0] for p in _body(stage).get("params", [])]
        assert ("eval" in params) == (name == "baseline_eval"), name


def test_plot_definitions_cover_every_configured_run():
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    files = {f for entry in dvc["plots"] if isinstance(entry, dict) for spec in entry.values() for f in (spec.get("y") or {})}
    for family, runs in (("sft", "sft_runs"), ("ei", "ei_runs"), ("grpo", "grpo_runs")):
        named = {Path(f).parts[2] for f in files if f.startswith(f"results/{family}/")}
        assert named == set(params[runs]), f"dvc.yaml plots name {sorted(named)} for {family}, params.yaml has {sorted(params[runs])}"


def test_ei_rounds_form_a_chain_and_the_plots_read_the_last_round():
    stages = _stages()
    rounds = sorted(int(name.rsplit("_", 1)[1]) for name in stages if name.startswith("ei_round_"))
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) >= 1, rounds
    for k in rounds:  # round k trains round k-1's model and extends its history (the block tests.stage_deps prints)
        assert stages[f"ei_round_{k}"] == yaml.safe_load(ei_round_block(k))[f"ei_round_{k}"], f"ei_round_{k} (python -m tests.stage_deps --ei-round {k})"
    last = f"round_{rounds[-1]}"
    assert f"--ei results/ei/{{run}}/{last} " in stages["plots"]["cmd"]
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    ei_files = [f for entry in dvc["plots"] if isinstance(entry, dict) for spec in entry.values() for f in (spec.get("y") or {}) if "/ei/" in f]
    assert ei_files and all(Path(f).parts[3] == last for f in ei_files), ei_files
