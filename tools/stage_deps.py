"""The a5core packages each stage runs, read from its imports: what dvc.spec.yaml's `code:` lists must be.

- A stage runs its script, and `a5core.stage.launch` when its command starts with `python -m a5core.stage.launch`.
  What those import, followed through a5core (statements anywhere in a file, inside functions too), is the code
  whose edit can change the stage's outputs; its packages (a5core/<package>) are the stage's code deps (through
  their hash files, code_hashes/a5core/<package>.txt: a5core/base/code.py).
- `python -m tools.stage_deps` prints them per script; dvc.spec.yaml lists them per stage as `code:`, which
  `python -m tools.dag` writes into dvc.yaml; tests/test_dvc_deps.py checks that the two agree.
- Not counted: a5core/__init__.py (a docstring only, tests/test_layers.py keeps it so), and the pipeline line of
  a5core/stage/entry.py, `python -m a5core.checks.forecast`: a program run beside the stage, not imported by it,
  whose output goes to the console only.
- `imports(module)` is also what tests/test_layers.py reads, with the strings that name a5core modules counted too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = "a5core.stage.launch"
_NAMED = re.compile(r"a5core(\.\w+)+")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "a5core").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def resolve(name: str) -> str | None:
    """The a5core module `name` refers to (a module, or the package or module whose attribute it is), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name if name and name.split(".")[0] == "a5core" else None


def imports(path: Path, module: str = "", strings: bool = False) -> set[str]:
    """The a5core modules a file imports (absolute and relative; `from p import m` names module p.m when there is
    one), and with `strings` also those its string literals name (`"a5core.checks.forecast"`)."""
    found: set[str] = set()
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
        elif (
            strings and isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.fullmatch(node.value)
        ):
            found.add(node.value)
    return {m for m in map(resolve, found) if m and m != module}


def closure(start: set[str]) -> set[str]:
    """Every a5core module importing `start` loads, the packages above each module included (importing a.b.c runs
    a/__init__ and a/b/__init__ first)."""
    todo, seen = list(start), set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for sub in (".".join(parts[:i]) for i in range(2, len(parts) + 1)):
            if sub in MODULES and sub not in seen:
                seen.add(sub)
                todo.extend(imports(MODULES[sub], sub))
    return seen


def packages(script: str, launched: bool = False) -> list[str]:
    """The a5core packages a stage's script (run through the launcher or not) loads."""
    start = imports(ROOT / script) | ({LAUNCHER} if launched else set())
    return sorted({m.split(".")[1] for m in closure(start)})


def expected_code(cmd: str) -> list[str]:
    """The packages of a stage's command (`python [-m a5core.stage.launch] stages/<x>.py ...`)."""
    words = cmd.split()
    script = next(w for w in words if w.endswith(".py"))
    return packages(script, launched=LAUNCHER in words[: words.index(script)])


if __name__ == "__main__":
    for script in sorted((ROOT / "stages").glob("*.py")):
        name = str(script.relative_to(ROOT))
        print(f"{name}: code: [{', '.join(packages(name))}] (+ {', '.join(packages(name, True))} when launched)")
