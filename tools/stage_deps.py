"""The a5core modules each stage script can run, found from their import statements (the stages' DVC deps).

`python -m tools.stage_deps` prints, for every script under stages/, the a5core paths its `deps:` in dvc.yaml list
(a package folder when every module in it is used); `python -m tools.dag` writes them there. tests/test_dvc_deps.py
checks that dvc.yaml lists exactly these, so editing a module reruns the stages that use it and no others (narrow
invalidation: a change to the plots reruns only the plots, a change to GRPO only the GRPO stages).
Imports inside functions count (they run when the function does). Dynamic imports are not seen: the configured
reward function (in a5core.grader, which every grading stage imports anyway), and the section classes that
`config.check_params` loads only to validate the params file, and the pre-flight (a5core/preflight.py and the
plan it runs), both of which only refuse and change no output.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _imported(path: Path) -> set[str]:
    """a5core modules named by the import statements of one file (`from a5core import x` may name a submodule)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "a5core"}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "a5core"
            and node.level == 0
        ):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if module_file(f"{node.module}.{a.name}")}
    return out


def closure(script: Path) -> set[Path]:
    """Every a5core file that importing `script` (and calling into it) can load, parent packages included."""
    todo, seen = list(_imported(script)), set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ first
            sub = ".".join(parts[:i])
            f = module_file(sub)
            if f and f not in seen:
                seen.add(f)
                todo.extend(_imported(f))
    return seen


def compact(files: set[Path]) -> list[str]:
    """Relative paths, with a package folder in place of its modules when all of them are used."""
    out = set()
    for f in files:
        pkg = f.parent
        members = {p for p in pkg.glob("*.py")}
        use_dir = pkg != ROOT / "a5core" and members <= files
        out.add(str((pkg if use_dir else f).relative_to(ROOT)))
    return sorted(out)


def expected_deps() -> dict[str, list[str]]:
    return {f"stages/{p.name}": compact(closure(p)) for p in sorted((ROOT / "stages").glob("*.py"))}


if __name__ == "__main__":
    for script, deps in expected_deps().items():
        print(f"{script}: [{', '.join([script] + deps)}]")
