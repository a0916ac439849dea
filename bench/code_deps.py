"""How much of a5core each stage's reruns are keyed on, before and after the code_hashes stage (issue 60, item 2).

    python bench/code_deps.py            # prints a Markdown table (reports/code_deps.md)

Before, a stage depended on the source folders of the a5core packages it runs (`code:` in dvc.spec.yaml): an edit of
any line there reran it. Now it depends on their hash files (a5core/base/code.py), which change only when an executed
line does: docstrings, comments and blank lines no longer count. For each stage: the share of a5core's lines in its
packages (before), and the share of a5core's lines that are executed code in its packages (after). Console messages'
text is also left out of the hashes, but is counted here as executed (a line holds more than the text).
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.dag import expand, load_spec  # noqa: E402


def not_executed(source: str) -> set[int]:
    """Line numbers of docstrings, comment-only and blank lines."""
    lines = source.splitlines()
    out = {i + 1 for i, line in enumerate(lines) if not line.strip()}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and not lines[tok.start[0] - 1].split("#")[0].strip():
            out.add(tok.start[0])
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out |= set(range(body[0].lineno, body[0].end_lineno + 1))
    return out


def package_lines() -> dict[str, tuple[int, int]]:
    """{package: (lines, executed lines)} over its .py files."""
    out = {}
    for package in sorted(p for p in (ROOT / "a5core").iterdir() if (p / "__init__.py").exists()):
        total = executed = 0
        for f in package.rglob("*.py"):
            source = f.read_text()
            n = len(source.splitlines())
            total, executed = total + n, executed + n - len(not_executed(source))
        out[package.name] = (total, executed)
    return out


def main() -> None:
    sizes = package_lines()
    all_lines = sum(t for t, _ in sizes.values())
    spec = load_spec()
    codes = {name: stage.get("code", []) for name, stage in spec["stages"].items()}
    expand(spec)  # the spec is valid
    print(f"a5core: {all_lines} lines, {sum(e for _, e in sizes.values())} of them executed code\n")
    print("| stage | packages | any line reruns it (before) | an executed line reruns it (after) |\n|---|---|---|---|")
    for name, code in codes.items():
        if not code:
            continue
        before = sum(sizes[p][0] for p in code) / all_lines
        after = sum(sizes[p][1] for p in code) / all_lines
        print(f"| {name} | {len(code)} | {before:.0%} | {after:.0%} |")


if __name__ == "__main__":
    main()
