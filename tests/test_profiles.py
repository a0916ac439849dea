"""Profiles inherit through Hydra's defaults list (issue 43): every field's default from its dataclass first
(conf/dataclass_defaults.yaml, which `python -m tools.profile --defaults` writes from them; issue 60), default and
full over it, smoke, cpu-study, cpu-leaderboard, cpu-rl-gains and quick over default, full-mini over full, each file
only its differences from what it composes over, block style. Every profile composes to the params.yaml recorded in
tests/fixtures/profiles/<profile>.yaml, through DVC's composition and through tools.profile. Those files were written
before the profiles inherited (each was a whole copy then), so that change left every params.yaml byte for byte as it
was; when the defaults moved to the dataclasses, every value stayed and the keys took their dataclass's order.

A change to a profile's values changes its params.yaml, and a change to a base those of its derived profiles too; so
it fails here until the fixtures are written again, on purpose, and their diff is reviewed with the change:

    for f in conf/profile/*.yaml; do p=$(basename "$f" .yaml)
        .venv/bin/python -m tools.profile "$p" --out "tests/fixtures/profiles/$p.yaml"; done
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from a5core.checks.params import RUN_SECTIONS
from tests.support.profiles import PROFILES, composed, composed_text
from tools import profile as profile_tool

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "profiles"
PROFILE_DIR = ROOT / "conf" / "profile"
BASES = {
    "smoke": "default",
    "cpu-study": "default",
    "cpu-leaderboard": "default",
    "cpu-rl-gains": "default",
    "quick": "default",
    "full-mini": "full",
}
MAX_LINE = 120


def own(profile: str) -> dict:
    """conf/profile/<profile>.yaml as written: its defaults list and its own keys."""
    return yaml.safe_load((PROFILE_DIR / f"{profile}.yaml").read_text())


def test_every_profile_has_a_fixture_and_every_fixture_a_profile():
    assert sorted(p.stem for p in FIXTURES.glob("*.yaml")) == PROFILES


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_composes_to_its_recorded_params(profile, tmp_path):
    expected = (FIXTURES / f"{profile}.yaml").read_text()
    header = profile_tool.HEADER.format(profile=profile)
    assert header + composed_text(profile) == expected, f"DVC's composition of {profile} changed (see the docstring)"
    profile_tool.compose(profile, [], tmp_path / "params.yaml")
    assert (tmp_path / "params.yaml").read_text() == expected, f"tools.profile's {profile} changed"


def test_bases_are_whole_and_the_derived_profiles_name_their_base():
    assert set(BASES) | set(BASES.values()) == set(PROFILES)
    for profile in PROFILES:
        defaults = own(profile).get("defaults")
        if profile in BASES:  # the base first, its runs cleared (Hydra would merge them with ours), then this file
            assert defaults == [BASES[profile], "reset/runs", "_self_"], profile
        else:
            assert defaults is None, f"{profile} is a base: over the dataclass defaults only"


def _same_as_base(mine: dict, base: dict, whole: set[str], where: str = "") -> list[str]:
    """Keys of `mine` that repeat `base` (or that `base` lacks); a key in `whole` (the runs reset/runs clears, which a
    derived profile lists even where they are its base's) is compared as a whole and never counts as a repeat."""
    found = []
    for key, value in mine.items():
        path = f"{where}{key}"
        if not isinstance(base, dict) or key not in base:
            found.append(f"{path}: not in the base")
        elif isinstance(value, dict) and value and path not in whole:
            found += _same_as_base(value, base[key], whole, f"{path}.")
        elif value == base[key] and path not in whole:
            found.append(f"{path}: {value!r}, as the base")
    return found


@pytest.mark.parametrize("profile", sorted(BASES))
def test_a_derived_profile_holds_only_its_differences(profile):
    mine = {k: v for k, v in own(profile).items() if k != "defaults"}
    cleared = set(yaml.safe_load((PROFILE_DIR / "reset" / "runs.yaml").read_text()))
    assert cleared <= set(mine), f"{profile}: reset/runs clears {sorted(cleared - set(mine))}, so it must list them"
    assert _same_as_base(mine, composed(BASES[profile]), cleared) == []


@pytest.mark.parametrize("profile", sorted(set(PROFILES) - set(BASES)))
def test_a_base_profile_holds_only_its_differences_from_the_dataclass_defaults(profile):
    """A default lives in its dataclass field only: a base profile that repeats one (or names a field no dataclass
    has) fails here."""
    mine = {k: v for k, v in own(profile).items() if k != "defaults"}
    assert _same_as_base(mine, profile_tool.dataclass_defaults(), set(RUN_SECTIONS)) == []


def test_the_composed_defaults_are_the_dataclasses():
    """conf/dataclass_defaults.yaml, the first layer of every composition, is what the dataclasses say now: a default
    edited in a dataclass fails here until `python -m tools.profile --defaults` writes the file again."""
    assert profile_tool.DEFAULTS.read_text() == profile_tool.dataclass_defaults_text()
    assert yaml.safe_load(profile_tool.DEFAULTS.read_text())["grpo"]["kl_coef"] == 0.0  # read as YAML, as Hydra does


def test_a_field_no_profile_lists_is_in_params_yaml_and_takes_an_override(tmp_path):
    """`-S grpo.kl_coef=0.05` works though default.yaml does not list kl_coef: its dataclass default is composed."""
    assert "kl_coef" not in own("default")["grpo"] and composed("default")["grpo"]["kl_coef"] == 0.0
    profile_tool.compose("default", ["grpo.kl_coef=0.05"], tmp_path / "params.yaml")
    assert yaml.safe_load((tmp_path / "params.yaml").read_text())["grpo"]["kl_coef"] == 0.05


@pytest.mark.parametrize("path", sorted(PROFILE_DIR.rglob("*.yaml")), ids=lambda p: p.name)
def test_profiles_are_block_style_with_short_lines(path):
    """Sections and their keys one per line (a run's overrides or a list may stay on one line if it fits)."""
    text = path.read_text()
    long = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, f"{path.name}: lines {long} are over {MAX_LINE} characters"
    root = yaml.compose(text)
    sections = [value for _, value in root.value if isinstance(value, yaml.MappingNode)]
    flow = [node.start_mark.line + 1 for node in [root, *sections] if node.flow_style and node.value]
    assert not flow, f"{path.name}: flow-style sections at lines {flow}"


def test_a_profile_scripts_clone_runs_its_own_code(tmp_path):
    """scripts/clone.sh's `enter_clone` (cpu_study.sh, leaderboard.sh, rl_gains.sh run a profile in a clone): a stage
    script there imports the clone's a5core, not this workspace's (the .venv installs it in editable mode), so edits in
    progress here never reach a study running there."""
    clone = tmp_path / "clone"
    where = 'python -c "import a5core; print(a5core.__file__)"'
    r = subprocess.run(
        ["bash", "-c", f". scripts/clone.sh && enter_clone {clone} && cd stages && {where}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert Path(r.stdout.strip().splitlines()[-1]) == clone / "a5core" / "__init__.py"
