"""Typed params: named runs, every bad value a clear error (all reported at once), the profiles, the lazy API."""

import ast
import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

import pytest
import yaml

from a5core.checks.params import check_params
from a5core.config.sections import ConfigError, from_dict, load_run, read_params
from a5core.rl.grpo import GRPOConfig
from tests.support.profiles import PROFILES, write_composed

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path, runs):
    p = tmp_path / "params.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "grpo": {
                    "n_grpo_steps": 3,
                    "rollout_batch_size": 8,
                    "group_size": 4,
                    "train_batch_size": 8,
                    "gradient_accumulation_steps": 2,
                },
                "grpo_runs": runs,
            }
        )
    )
    return p


def test_a_run_overrides_the_shared_section(tmp_path):
    p = _params(tmp_path, {"a": {}, "b": {"lr": 3e-6}})
    assert load_run(GRPOConfig, "grpo", "grpo_runs", "a", p).lr == GRPOConfig().lr
    b = load_run(GRPOConfig, "grpo", "grpo_runs", "b", p)
    assert b.lr == 3e-6 and b.n_grpo_steps == 3


def test_run_errors_are_clear(tmp_path):
    p = _params(tmp_path, {"a": {"init_policy": "base"}, "bad": {"loss_type": "ppo"}})
    with pytest.raises(ConfigError, match="init_policy cannot differ per run"):
        load_run(GRPOConfig, "grpo", "grpo_runs", "a", p)
    with pytest.raises(ConfigError, match="has no entry 'zzz'"):
        load_run(GRPOConfig, "grpo", "grpo_runs", "zzz", p)
    with pytest.raises(ConfigError, match="'ppo' is not one of"):
        load_run(GRPOConfig, "grpo", "grpo_runs", "bad", p)


def _check(tmp_path, edit) -> str:
    """check_params on the default params with `edit` applied; returns the error text ('' when valid)."""
    params = read_params(ROOT / "params.yaml")
    edit(params)
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        check_params(p)
    except ConfigError as err:
        return str(err)
    return ""


def _set(section, key, value):
    def edit(params):
        params[section] = {**params[section], key: value} if isinstance(params.get(section), dict) else value

    return edit


BAD = [  # (section, key, value, expected message part): each was a traceback or silently accepted before
    ("grpo", "group_size", 0, "group_size: must be >= 2"),
    ("grpo", "gradient_accumulation_steps", 0, "gradient_accumulation_steps: must be >= 1"),
    ("sft", "micro_batch_size", 0, "micro_batch_size: must be >= 1"),
    ("grpo", "betas", [0.9], "betas: expected 2 values"),
    ("grpo", "betas", [0.9, 1.5], "betas[1]: must be"),
    ("validation", "reward_fn", "rewards.nope:fn", "cannot import rewards.nope"),
    ("validation", "reward_fn", "os:system", "a custom reward lives in rewards/"),
    ("validation", "reward_fn", "a5core.grader:nope", "no callable 'nope'"),
    ("sft", "batch_size", -8, "batch_size: must be >= 1"),
    ("sft", "epochs", -1, "epochs: must be >= 1"),
    ("grpo", "n_grpo_steps", -1, "n_grpo_steps: must be >= 1"),
    ("grpo", "time_budget_s", -5, "time_budget_s: must be >= 0"),
    ("validation", "grader_timeout_s", -1, "grader_timeout_s: must be > 0"),
    ("validation", "temperature", -1, "temperature: must be >= 0"),
    ("validation", "top_p", 2, "top_p: must be > 0 and <= 1"),
    ("grpo", "lr", float("inf"), "lr: must be a finite number"),
    ("sft", "lr", float("nan"), "lr: must be a finite number"),
    ("model", "source", "pypi:--index-url=http://evil", "source 'pypi:--index-url"),
    ("model", "source", "hf:../../etc", "source 'hf:../../etc'"),
    ("data", "source", "jsonl:", "is not a path"),
    ("ei", "init_policy", "../../victim", "init_policy '../../victim'"),
    ("data", "n_train", "many", "expected int"),
    ("grpo", "cliprange", 1.5, "grpo.cliprange: must be > 0 and < 1, got 1.5"),  # issue 64: 1.5 is no clip range
    ("grpo_runs", "clip_offpolicy", {"cliprange": 1.0}, "grpo_runs.clip_offpolicy.cliprange: must be > 0 and < 1"),
]


@pytest.mark.parametrize("section,key,value,message", BAD)
def test_every_bad_value_is_a_clear_error(tmp_path, section, key, value, message):
    assert message in _check(tmp_path, _set(section, key, value))


def test_every_problem_is_reported_at_once(tmp_path):
    def edit(params):
        params["grpo"]["group_size"] = 0
        params["sft"]["batch_size"] = -1
        params["grpo_typo"] = {}

    err = _check(tmp_path, edit)
    assert (
        "3 problem(s)" in err
        and "grpo.group_size" in err
        and "batch_size" in err
        and "unknown section 'grpo_typo'" in err
    )


def test_null_section_and_unsafe_run_names(tmp_path):
    assert "grpo: expected a mapping" in _check(tmp_path, lambda params: params.update(grpo=None))
    for name in ("x/../../../victim", "../up", "a b", ".hidden"):
        err = _check(tmp_path, lambda params, name=name: params["grpo_runs"].update({name: {}}))
        assert "run name" in err and "becomes a path" in err, name


@pytest.mark.slow
def test_dvc_does_not_delete_outside_the_repo_for_a_traversing_run_name(tmp_path):
    """The stages refuse such a name (above), but DVC deletes a stage's outputs before its command runs. With the real
    dvc.yaml (params included), `dvc repro` of the run stops before any stage runs (DVC finds the run's record folder
    and its logs folder folded onto overlapping paths, or check_params, which every run is downstream of, refuses the
    name), and the folder outside survives; `dvc repro -s` skips both, and DVC deletes the folder before any project
    code runs (the residual case docs/reliability.md documents)."""
    from tests.support.repos import scratch_repo

    work, run = scratch_repo(tmp_path, "smoke")
    victim = tmp_path / "victim"  # where models/grpo_x/../../../victim lands
    victim.mkdir()
    (victim / "file").write_text("keep")
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["grpo_runs"]["x/../../../victim"] = {}
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    r = run("dvc", "repro", "grpo@x/../../../victim")
    assert r.returncode != 0 and (victim / "file").read_text() == "keep", r.stdout + r.stderr
    # DVC refuses the DAG itself (the run's record folder and its logs fold onto one path), or the params check does
    refused = ("run name 'x/../../../victim'", "overlap and are thus in the same tracked directory")
    assert any(m in r.stderr for m in refused), r.stdout + r.stderr
    assert not (work / "models" / "grpo_x").exists() and "Running stage 'grpo@" not in r.stdout
    r = run("dvc", "repro", "-s", "grpo@x/../../../victim")
    assert r.returncode != 0 and not victim.exists(), r.stdout + r.stderr  # DVC's own step: docs/reliability.md


def test_duplicate_keys_are_rejected(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("grpo:\n  lr: 1.0e-5\n  lr: 3.0e-5\n")
    with pytest.raises(ConfigError, match="duplicate key 'lr' \\(line 3\\)"):
        read_params(p)


def test_stage_refuses_bad_params_before_any_work(tmp_path):
    """check_params exits with the list of problems and no traceback, and every other stage of the DAG is downstream
    of its output, so DVC runs nothing else."""
    bad = tmp_path / "params.yaml"
    params = read_params(ROOT / "params.yaml")
    params["grpo"]["group_size"] = 1
    bad.write_text(yaml.safe_dump(params))
    out = tmp_path / "check.json"
    r = subprocess.run(
        [sys.executable, "stages/check_params.py", "--out", str(out), "--params", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "grpo.group_size: must be >= 2" in r.stderr and "Traceback" not in r.stderr
    assert "Nothing was run" in r.stderr and not out.exists()
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    roots = [n for n, s in stages.items() if n != "check_params" and not _upstream_of(n, "check_params", stages)]
    # code_hashes runs first, and may: it reads no params and writes one fixed folder, so no param reaches it
    assert roots == ["code_hashes"], f"stages that could run before check_params: {roots}"
    assert "params" not in stages["code_hashes"] and stages["code_hashes"]["outs"] == [{"code_hashes": ANY}]


def _upstream_of(name: str, target: str, stages: dict) -> bool:
    """Whether `target` is upstream of stage `name` (one of its deps is an output of target or of a stage above)."""
    outs = {}
    for n, s in stages.items():
        body = s.get("do", s)
        for kind in ("outs", "metrics", "plots"):
            for o in body.get(kind) or []:
                outs[(next(iter(o)) if isinstance(o, dict) else o).split("$")[0]] = n
    seen, todo = set(), [name]
    while todo:
        body = stages[todo.pop().split("@")[0]]
        body = body.get("do", body)
        for dep in body.get("deps") or []:
            writer = next((w for o, w in outs.items() if o and (dep == o or dep.startswith(o))), None)
            if writer == target:
                return True
            if writer and writer not in seen:
                seen.add(writer)
                todo.append(writer)
    return False


def test_every_profile_is_valid_and_params_yaml_is_the_default_profile(tmp_path):
    for profile in PROFILES:
        check_params(write_composed(profile, tmp_path))
    assert read_params(ROOT / "params.yaml") == read_params(tmp_path / "default.yaml")


def test_full_mini_differs_from_full_only_in_sizes(tmp_path):
    full, mini = (read_params(write_composed(p, tmp_path)) for p in ("full", "full-mini"))
    assert list(full) == list(mini)
    sizes = {
        "source",
        "n_train",
        "n_validation",
        "n_sft",
        "batch_size",
        "max_tokens",
        "grader_workers",
        "epochs",
        "micro_batch_size",
        "micro_batch_tokens",
        "logits_chunk",
        "eval_every",
        "eval_examples",
        "checkpoint_every",
        "n_questions",
        "n_grpo_steps",
        "rollout_batch_size",
        "group_size",
        "train_batch_size",
        "gradient_accumulation_steps",
        "normalize_constant",
        "if_no_correct",
        "examples",
        "device",  # full needs CUDA; full-mini runs on the CPU
    }
    for section in full:
        if section.endswith("_runs"):  # a subset of the runs, with the same settings except sizes
            for run, overrides in mini[section].items():
                assert run in full[section], (section, run)
                changed = {
                    k for k in set(overrides) | set(full[section][run]) if overrides.get(k) != full[section][run].get(k)
                }
                assert changed <= sizes, (section, run, changed)
            continue
        assert list(full[section]) == list(mini[section]), section
        changed = {k for k in full[section] if full[section][k] != mini[section][k]}
        assert changed <= sizes, (section, changed)


def test_the_handouts_names_are_in_one_module_and_the_stage_helpers_load_no_training_math():
    import a5core
    import a5core.handout

    for name in a5core.handout.__all__:
        assert callable(getattr(a5core.handout, name)), name
    body = ast.parse(Path(a5core.__file__).read_text()).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr), "a5core/__init__.py holds only its docstring"
    # importing a stage helper loads none of the training math (so its DVC deps stay narrow)
    code = "import sys, a5core.stage.entry; print(sorted(m for m in sys.modules if m.startswith('a5core')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "a5core.rl" not in out and "a5core.report" not in out and "a5core.checks" not in out, out


def test_params_read_floats_the_way_dvc_writes_them(tmp_path):
    """`dvc exp run -S grpo.lr=3e-6` writes `3e-6`, a string to YAML 1.1 (PyYAML): it must be a float."""
    p = tmp_path / "params.yaml"
    p.write_text("grpo:\n  lr: 3e-6\n  advantage_eps: 1.0e-6\n  cliprange: .2\n  seed: 7\n  prompt: '1e-3'\n")
    g = read_params(p)["grpo"]
    assert g == {"lr": 3e-6, "advantage_eps": 1e-6, "cliprange": 0.2, "seed": 7, "prompt": "1e-3"}
    assert type(g["seed"]) is int
    p.write_text(p.read_text().replace("prompt: '1e-3'", "prompt: r1_zero") + "grpo_runs:\n  a: {}\n")
    assert load_run(GRPOConfig, "grpo", "grpo_runs", "a", p).lr == 3e-6


def test_bool_is_not_an_int_and_literal_needs_the_type():
    with pytest.raises(ConfigError, match="expected int"):
        from_dict(GRPOConfig, {"n_grpo_steps": True}, "grpo")
    with pytest.raises(ConfigError, match="std_ddof"):
        from_dict(GRPOConfig, {"std_ddof": 2}, "grpo")


# Numbers any value of their type serves: seeds are hashed into each draw's own (a5core.base.seeds.derive_seed)
UNBOUNDED = {"seed", "seeds"}


def test_every_numeric_field_of_every_section_has_a_range():
    """Issue 64: a new int or float field without `Bound` (its range: Positive, NonNegative, ...) fails here, so an
    out-of-range value is refused by check_params before any work instead of reaching the run."""
    import dataclasses
    import typing

    from a5core.base.typed import Bound
    from a5core.checks.params import SECTIONS

    def bounded(hint) -> bool:
        if typing.get_origin(hint) is typing.Annotated:
            return any(isinstance(m, Bound) for m in hint.__metadata__)
        args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
        if args:  # Optional[...], tuple[...]: every member
            return all(bounded(a) for a in args)
        return hint not in (int, float)

    missing = []
    for name, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls, include_extras=True)
        for field in dataclasses.fields(cls):
            if field.name not in UNBOUNDED and not bounded(hints[field.name]):
                missing.append(f"{name}.{field.name}")
    assert missing == [], f"numeric fields without a range: {missing}"
