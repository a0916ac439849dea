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
