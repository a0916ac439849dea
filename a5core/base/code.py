"""The code a stage executes, as hashes that ignore what it does not execute (issue 60, item 2).

- `executed_hash(path)`: a Python file's syntax tree without docstrings and without the text of console messages
  (`print` to the console, `logger.*`/`logging.*`, `warnings.warn`, `sys.exit`); comments and formatting are not in
  the tree. Any other file: its bytes. The tree is written out field by field, leaving out empty fields, so Python
  3.11-3.13 (whose trees gained empty fields such as `type_params`) give the same hash.
- `write_hashes(repo, out)`: one file per package (a5core/<package>, rewards, each stage script) listing each file's
  hash; the `code_hashes` stage writes them and every other stage depends on its packages' files instead of their
  folders, so an edit that changes no executed code changes no file and reruns nothing below `code_hashes`.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

CONSOLE_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "warn"}
CONSOLE_OWNERS = {"logger", "logging", "log", "warnings"}


def _docstring_dropped(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:] or [ast.Pass()]
    return body


def _is_console_call(call: ast.Call) -> bool:
    """print without `file=`, logger/logging/warnings methods, sys.exit: their text reaches only the console."""
    fn = call.func
    if isinstance(fn, ast.Name):
        return fn.id == "print" and not any(k.arg == "file" for k in call.keywords)
    if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name):
        owner, method = fn.value.id, fn.attr
        return (owner in CONSOLE_OWNERS and method in CONSOLE_METHODS) or (owner, method) == ("sys", "exit")
    return False


def _text_blanked(node: ast.expr) -> ast.expr:
    """A text argument (a string or f-string) becomes "", any other (sys.exit(1), a variable) stays."""
    text = isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
    return ast.Constant("") if text else node


def _dump(node) -> str:
    """The tree, field by field, empty fields left out (stable across Python versions)."""
    if isinstance(node, ast.AST):
        fields = [(f, getattr(node, f, None)) for f in node._fields]
        inner = ",".join(f"{f}={_dump(v)}" for f, v in fields if v not in (None, []))
        return f"{type(node).__name__}({inner})"
    if isinstance(node, list):
        return "[" + ",".join(_dump(v) for v in node) + "]"
    return repr(node)


def executed_source(source: str) -> str:
    """`source`'s syntax tree without docstrings and console message text, as a stable string."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            node.body = _docstring_dropped(node.body)
        elif isinstance(node, ast.Call) and _is_console_call(node):
            node.args = [_text_blanked(a) for a in node.args]
    return _dump(tree)


def executed_hash(path: Path) -> str:
    """sha256 of what `path` executes (a .py file's `executed_source`), or of its bytes (any other file)."""
    data = executed_source(path.read_text()).encode() if path.suffix == ".py" else path.read_bytes()
    return hashlib.sha256(data).hexdigest()


def package_files(root: Path) -> list[Path]:
    """The files of a package folder (or the one file `root`), bytecode left out, in a fixed order."""
    if root.is_file():
        return [root]
    return sorted(f for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")


def fingerprint(root: Path, base: Path) -> str:
    """One line per file of `root`: its path relative to `base` and its `executed_hash`."""
    return "".join(f"{f.relative_to(base)} {executed_hash(f)}\n" for f in package_files(root))


def code_roots(repo: Path) -> dict[str, Path]:
    """What the stages run, by the name of its hash file: each package a5core/<package>, rewards (custom reward
    functions), and each stage script stages/<name> (without .py)."""
    roots = {f"a5core/{p.name}": p for p in sorted((repo / "a5core").iterdir()) if (p / "__init__.py").exists()}
    roots["rewards"] = repo / "rewards"
    roots |= {f"stages/{p.stem}": p for p in sorted((repo / "stages").glob("*.py"))}
    return roots


def write_hashes(repo: Path, out: Path) -> list[str]:
    """`out/<name>.txt` = the `fingerprint` of each of `code_roots(repo)`; a file whose text is unchanged is not
    rewritten, and a file no root names is removed. Returns the names whose file changed."""
    roots, changed = code_roots(repo), []
    for stale in out.rglob("*.txt") if out.exists() else []:
        if str(stale.relative_to(out).with_suffix("")) not in roots:
            stale.unlink()
    for name, root in roots.items():
        text, target = fingerprint(root, repo), out / f"{name}.txt"
        if not target.exists() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            changed.append(name)
    return changed
