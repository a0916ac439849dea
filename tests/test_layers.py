"""The house's shape, read from the source: a5core's packages in layers (a5core/__init__.py lists them, lowest
first), no import from a package to one above it, no import cycle between modules, and no hidden imports.

What counts as an import: `import` / `from ... import` statements anywhere in a file (inside functions too, relative
ones resolved), and every string literal that names an a5core module (`"a5core.checks.forecast"`, as in a
`python -m` command line). Strings `module:function` are reward functions a user names in params; the two places
that load such a value (`reward_fn_problem`, `load_reward_fn`) are the only `importlib.import_module` calls allowed,
and they take the params value, never a literal.
"""

from __future__ import annotations

import ast

import pytest

from tools.stage_deps import MODULES, ROOT, imports

LAYERS = ["base", "grader", "config", "data", "model", "generation", "run", "rl", "report", "checks", "stage"]
TOP = {"a5core.handout"}  # the handout's names, above every package; nothing in a5core imports it
DYNAMIC_LOADERS = {("a5core/config/sections.py", "reward_fn_problem"), ("a5core/grader/pool.py", "load_reward_fn")}


def _package(module: str) -> str:
    parts = module.split(".")
    return module if module in TOP else (parts[1] if len(parts) > 1 else "a5core")


GRAPH = {m: imports(p, m, strings=True) for m, p in MODULES.items()}


def test_every_package_is_in_a_layer_and_says_what_it_may_import():
    packages = {_package(m) for m in MODULES} - {"a5core"} - TOP
    assert packages == set(LAYERS), packages ^ set(LAYERS)
    listed = (ROOT / "a5core" / "__init__.py").read_text()
    assert [p for p in LAYERS if f"\n- {p}/" in listed] == LAYERS, "a5core/__init__.py lists the layers in order"
    for name in LAYERS:
        doc = ast.get_docstring(ast.parse((ROOT / "a5core" / name / "__init__.py").read_text())) or ""
        assert doc.startswith(f"{name}:") and "import" in doc.lower(), (
            f"a5core/{name}/__init__.py: say what it holds and imports"
        )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_from_a_higher_layer(module):
    rank = {p: i for i, p in enumerate(LAYERS)} | {"a5core": -1} | {t: len(LAYERS) for t in TOP}
    upward = [m for m in GRAPH[module] if rank[_package(m)] > rank[_package(module)]]
    assert not upward, f"{module} ({_package(module)}/) imports from a higher layer: {upward}"


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n) :] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def test_no_hidden_imports():
    """importlib loads only a user's reward function (a params value), in the two loaders that take it."""
    calls = []
    for path in MODULES.values():
        tree = ast.parse(path.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
                    literal = node.args and isinstance(node.args[0], ast.Constant)
                    where = (str(path.relative_to(ROOT)), getattr(fn, "name", "<module>"))
                    if literal or (isinstance(fn, ast.FunctionDef) and where not in DYNAMIC_LOADERS):
                        calls.append(f"{where[0]}:{node.lineno} in {where[1]}")
    assert not calls, f"importlib loads outside the reward-function loaders: {calls}"
    assert "__getattr__" not in (ROOT / "a5core" / "__init__.py").read_text()


def test_the_test_sees_a_break():
    """The graph reads strings and function-level imports: a5core.stage.entry names the forecast's module in its
    command line, and a5core.stage.training imports the plan inside a function."""
    assert "a5core.checks.forecast" in GRAPH["a5core.stage.entry"]
    assert "a5core.run.plan" in GRAPH["a5core.stage.training"]
    assert "a5core.grader.pool" in GRAPH["a5core.grader.single"]
