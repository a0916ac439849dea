"""A user's first hour with params: every documented `-S` composes, every key is overridable with plain `-S`, a typo
ends in one line naming the closest key (through DVC, tools.profile and an edited params.yaml), the old name of a
renamed key points to the new one, and a refused `dvc exp run` leaves a workspace that one command repairs."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from a5core.base.typed import ConfigError, read_params
from a5core.checks.params import SECTIONS, _section_class, check_params, section_problems
from tools import profile as profile_tool

ROOT = Path(__file__).resolve().parents[1]
PROFILES = profile_tool.PROFILES
DVC = str(Path(sys.executable).with_name("dvc"))


def composed(profile: str, overrides: list[str], tmp_path: Path) -> dict:
    out = tmp_path / f"{profile}.yaml"
    profile_tool.compose(profile, overrides, out)
    return read_params(out)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_field_of_every_section_is_in_every_profile(profile, tmp_path):
    """example-get-started's rule: params.yaml holds every field with its value, so plain `-S` can set any of them
    (Hydra's struct mode refuses a key that is not there)."""
    params = composed(profile, [], tmp_path)
    missing = [
        f"{section}.{f.name}"
        for section in SECTIONS
        for f in dataclasses.fields(_section_class(section))
        if f.name not in (params.get(section) or {})
    ]
    assert not missing, f"conf/profile/{profile}.yaml lacks {missing}"


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, profile, overrides) of every `dvc exp run -S ...` and `python -m tools.profile ...` in the README,
    docs/ and the comments of conf/ (placeholders such as `<run>` or `...` skipped)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "conf").rglob("*.yaml"))]
    found = []
    for path in files:
        text = re.sub(r"\\\n\s*", " ", path.read_text())  # shell line continuations
        for m in re.finditer(r"(dvc exp run|tools\.profile) ([^`\n]*)", text):
            try:
                words = shlex.split(m.group(2).split("#")[0].split("&&")[0])
            except ValueError:
                continue
            if m.group(1) == "dvc exp run":
                sets = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-S", "--set-param")]
                profile = next((s.split("=", 1)[1] for s in sets if s.startswith("profile=")), "default")
                overrides = [s for s in sets if not s.startswith("profile=")]
            else:
                if not words or words[0] not in PROFILES:
                    continue
                profile, overrides = words[0], [w for w in words[1:] if "=" in w]
            if any(c in "".join(overrides) for c in "<>…") or "..." in overrides:
                continue
            found.append((f"{path.relative_to(ROOT)}: {m.group(0)[:80]}", profile, overrides))
    return found


def test_the_cards_commands_are_documented():
    commands = {(p, tuple(o)) for _, p, o in documented_commands()}
    assert ("default", ("grpo.lr=3e-6",)) in commands


@pytest.mark.parametrize("where,profile,overrides", documented_commands(), ids=lambda v: str(v)[:60])
def test_every_documented_override_composes(where, profile, overrides, tmp_path):
    assert section_problems(composed(profile, overrides, tmp_path)) == [], where


def test_a_typo_through_tools_profile_is_one_line_with_the_closest_key(tmp_path):
    before = (ROOT / "params.yaml").read_bytes()
    r = subprocess.run(
        [sys.executable, "-m", "tools.profile", "default", "grpo.learnig_rate=3e-6"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        "error: unknown param 'grpo.learnig_rate': did you mean grpo.lr? (params.yaml lists every param)"
    )
    assert (ROOT / "params.yaml").read_bytes() == before  # refused: nothing written
    with pytest.raises(profile_tool.ProfileError, match=r"unknown key 'foo'"):
        profile_tool.compose("default", ["+grpo.foo=1"], tmp_path / "p.yaml")
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    "edit,message",
    [
        ({"grpo": {"learnig_rate": 3e-6}}, "grpo: unknown key 'learnig_rate'; did you mean grpo.lr?"),
        ({"grpo": {"learning_rate": 3e-6}}, "grpo: key 'learning_rate' was renamed to 'lr'"),
        ({"sft": {"learning_rate": 3e-6}}, "sft: key 'learning_rate' was renamed to 'lr'"),
        ({"ei": {"learning_rate": 3e-6}}, "ei: key 'learning_rate' was renamed to 'lr'"),
        ({"grpo_runs": {"a": {"learning_rate": 1e-6}}}, "grpo_runs.a: key 'learning_rate' was renamed to 'lr'"),
        ({"grpo": {"cliprange_hihg": 0.28}}, "grpo: unknown key 'cliprange_hihg'; did you mean grpo.cliprange_high?"),
        ({"gpro": {}}, "unknown section 'gpro'; did you mean 'grpo'?"),
        # a peer's name for an a5 field points at a5's, not at the spelling nearest it (TRL's beta is not betas)
        ({"grpo": {"beta": 0.04}}, "grpo: unknown key 'beta'; TRL's GRPOConfig 'beta' is grpo.kl_coef here"),
        (
            {"grpo": {"num_generations": 8}},
            "grpo: unknown key 'num_generations'; TRL's GRPOConfig 'num_generations' is grpo.group_size here",
        ),  # fmt: skip
        (
            {"grpo": {"kl_loss_coef": 0.001}},
            "grpo: unknown key 'kl_loss_coef'; verl's actor 'kl_loss_coef' is grpo.kl_coef here",
        ),  # fmt: skip
    ],
)
def test_an_edited_params_file_names_the_closest_key(edit, message, tmp_path):
    params = read_params(ROOT / "params.yaml")
    for section, values in edit.items():
        params[section] = {**(params.get(section) or {}), **values}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError) as err:
        check_params(path)
    assert f"  - {message}" in str(err.value).splitlines()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _dvc(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([DVC, *args], cwd=repo, capture_output=True, text=True, env=env)


@pytest.fixture
def tiny_repo(tmp_path) -> Path:
    """A DVC repo with the project's conf/, Hydra plugin and params check, and one cheap stage that reads
    grpo.lr: the real `dvc exp run` path with no model."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for folder in ("conf", "hydra_plugins", "stages", "tools"):
        subprocess.run(["cp", "-r", str(ROOT / folder), str(repo / folder)], check=True)
    (repo / "params.yaml").write_bytes((ROOT / "params.yaml").read_bytes())
    (repo / "models" / "sft_filtered").mkdir(parents=True)  # the init_policy the params check looks for
    (repo / "models" / "sft_filtered" / "config.json").write_text("{}")
    (repo / "dvc.yaml").write_text(
        "stages:\n"
        "  check_params:\n"
        "    cmd: python stages/check_params.py --out check.json\n"
        "    params:\n"
        "      - params.yaml:\n"
        "    outs: [check.json]\n"
        "  train:\n"
        "    cmd: python -c \"import yaml; open('lr.txt', 'w').write(str(yaml.safe_load(open('params.yaml'))"
        "['grpo']['lr']))\"\n"
        "    deps: [check.json]\n"
        "    params: [grpo]\n"
        "    outs: [lr.txt]\n"
    )
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    assert _dvc(repo, "init", "-q").returncode == 0
    _dvc(repo, "config", "core.analytics", "false")
    _dvc(repo, "config", "hydra.enabled", "true")
    (repo / ".gitignore").write_text("__pycache__/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    return repo


def test_dvc_exp_run_sets_any_key_and_a_typo_is_one_line(tiny_repo):
    r = _dvc(tiny_repo, "exp", "run", "-S", "grpo.lr=3e-6", "-S", "grpo.kl_coef=0.1", "-S", "ei.reward_fn=x:y")
    assert r.returncode != 0  # ei.reward_fn x:y cannot be imported: the params check refuses it, after composing
    params = read_params(tiny_repo / "params.yaml")
    assert params["grpo"]["lr"] == 3e-6 and params["grpo"]["kl_coef"] == 0.1 and params["ei"]["reward_fn"] == "x:y"
    r = _dvc(tiny_repo, "exp", "run", "-S", "grpo.learnig_rate=3e-6")
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("ERROR")]
    assert lines == [
        "ERROR: unexpected error - unknown param 'grpo.learnig_rate': did you mean grpo.lr? "
        "(params.yaml lists every param)"
    ]


def test_a_refused_experiment_leaves_a_workspace_that_restore_repairs(tiny_repo):
    """The sequence of issue 42: an applied experiment, then a refused one; params.yaml must describe the results."""
    r = _dvc(tiny_repo, "exp", "run", "-S", "grpo.lr=3e-6")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tiny_repo / "lr.txt").read_text() == "3e-06"
    r = _dvc(tiny_repo, "exp", "run", "-S", "grpo.loss_type=grpo_clipp")  # refused by the params check
    assert r.returncode != 0 and "grpo_clipp" in r.stdout + r.stderr
    assert _dvc(tiny_repo, "repro").returncode != 0  # the refused value stayed in params.yaml
    r = subprocess.run(
        [sys.executable, "-m", "tools.profile", "--restore"], cwd=tiny_repo, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert read_params(tiny_repo / "params.yaml")["grpo"]["lr"] == 3e-6  # what lr.txt was made with
    # DVC deleted check_params' output before the refusal; the repro brings it back and reruns nothing below it
    r = _dvc(tiny_repo, "repro")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Running stage 'train'" not in r.stdout
    assert (tiny_repo / "lr.txt").read_text() == "3e-06"
    assert "up to date" in _dvc(tiny_repo, "status").stdout


def test_restore_takes_each_stages_own_params_after_a_stopped_run(tmp_path):
    """Issue 64: a `dvc exp run -S grpo.lr=3e-6` stopped by Ctrl-C after check_params leaves the new lr in check_params'
    entry while the GRPO stage keeps the lr its outputs were made with: --restore writes that one back. A stopped run
    that finished one GRPO stage and not the other has no one params file: refused, naming both."""
    params = read_params(ROOT / "params.yaml")
    new = {**params, "grpo": {**params["grpo"], "lr": 3e-6}}
    lock = {
        "schema": "2.0",
        "stages": {
            "check_params": {"params": {"params.yaml": new}},
            "grpo@a": {"params": {"params.yaml": {"grpo": params["grpo"], "grpo_runs.a": {}}}},
            "plots": {"params": {"params.yaml": {"grpo_runs": {"a": {}}, "data.n_validation": 64}}},
        },
    }
    path = tmp_path / "dvc.lock"
    path.write_text(yaml.safe_dump(lock))
    assert profile_tool.locked_params(path)["grpo"]["lr"] == params["grpo"]["lr"] != 3e-6
    profile_tool.restore(path, tmp_path / "params.yaml")
    assert read_params(tmp_path / "params.yaml")["grpo"] == params["grpo"]
    assert list(read_params(tmp_path / "params.yaml")) == list(params)  # no params.yaml to follow: composition order
    lock["stages"]["grpo@b"] = {"params": {"params.yaml": {"grpo": new["grpo"]}}}
    path.write_text(yaml.safe_dump(lock))
    with pytest.raises(profile_tool.ProfileError, match=r"two values of grpo.lr: grpo@a with 1e-05, grpo@b with 3e-06"):
        profile_tool.locked_params(path)
