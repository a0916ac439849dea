"""The code stays readable: ruff's lint and format checks pass, and no function in a5core/ or stages/ is longer than
50 lines (a function that needs more is two functions). A function counts whole, from its first decorator or `def`
to its end (issue 60: the signature is read too; one whose parameters fill many lines wants fewer of them)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 50


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_and_format_pass():
    lint = _ruff("check", ".")
    assert lint.returncode == 0, lint.stdout[-4000:]
    fmt = _ruff("format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout[-4000:]


def test_no_function_longer_than_50_lines():
    long = []
    for path in sorted([*(ROOT / "a5core").rglob("*.py"), *(ROOT / "stages").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


BACKEND_NAME_TEST = re.compile(r"""backend\b["'\]\)]*\s*[!=]=|getattr\([^)]*"takes_shards\"""")


def test_no_backend_name_test_outside_generation():
    """Issue 60: a generation backend declares its facts (a5core/config/sections.py `BACKEND_FACTS`: its own engine,
    shards, a GPU of its own); code outside a5core/generation/ reads those, never the backend's name."""
    found = []
    for path in sorted([*(ROOT / "a5core").rglob("*.py"), *(ROOT / "stages").glob("*.py")]):
        if path.is_relative_to(ROOT / "a5core" / "generation"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if BACKEND_NAME_TEST.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, found


SETTINGS = {"Compute", "Cut"}  # a stage's compute settings (a5core/model/compute.py) and their micro-batch cut
HANDOUT_SIGNATURES = {"get_response_log_probs"}  # the handout's adapter API: its callers pass no settings


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    return [d for d in (*fn.args.defaults, *fn.args.kw_defaults) if d is not None]


def test_settings_are_required_arguments():
    """Issue 60: no function in a5core/ or stages/ defaults a settings record (`Compute()`, `Cut()`): a caller that
    forgot the stage's settings would silently run the reference path in float32. Tests and benches pass
    `Compute()` by name where they mean it."""
    found = []
    for path in sorted([*(ROOT / "a5core").rglob("*.py"), *(ROOT / "stages").glob("*.py")]):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in HANDOUT_SIGNATURES:
                continue
            for d in _defaults(fn):
                called = d.func if isinstance(d, ast.Call) else None
                name = getattr(called, "id", None) or getattr(called, "attr", None)
                if name in SETTINGS:
                    found.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}: {ast.unparse(d)}")
    assert not found, found


STAGE_SCRIPTS_READING_SECTIONS = ("sft", "grpo", "ei_round", "baseline_eval", "filter_sft_data", "plots")


def _calls(tree: ast.AST, names: set[str]) -> list[str]:
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = getattr(n.func, "id", None) or getattr(n.func, "attr", None)
            if name in names:
                found.append(name)
    return found


def test_a_stage_reads_its_params_file_once():
    """Issue 60: a stage reads its params file once (`read_params`) and types its sections from those values
    (`section_of`, `run_of`, `entry_of`; a training stage's shared sections as `StageParams.of`, passed down to
    `training_stage`); the training prologue reads none itself."""
    loaders = {"load_section", "load_run"}
    for script in STAGE_SCRIPTS_READING_SECTIONS:
        tree = ast.parse((ROOT / "stages" / f"{script}.py").read_text())
        assert _calls(tree, {"read_params"}) == ["read_params"], script
        assert not _calls(tree, loaders), script
    prologue = ast.parse((ROOT / "a5core" / "stage" / "training.py").read_text())
    assert not _calls(prologue, loaders | {"read_params"})
