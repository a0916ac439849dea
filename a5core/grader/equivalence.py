"""Are two normalized answers equivalent, as MATH graders judge it?

Order of checks: identical strings -> multiple-choice letters -> structure (tuples and intervals are
ordered and their brackets must match, sets and bare comma lists are unordered, matrices elementwise) ->
scalars through the safe parser (exact rationals, else a *relative* numeric tolerance, else symbolic
simplification of the difference) -> math-verify's LaTeX parser as a last resort for notation the safe
parser does not cover (it only parses; comparison stays ours, since math-verify rounds to fixed decimals).
"""
from __future__ import annotations

import logging
import re

import sympy

from a5core.grader.normalize import Rejected, compact
from a5core.grader.parse import Unparsable, parse_math

REL_TOL = 1e-9
_RELATION = re.compile(r"<|>|\\le|\\ge|\\leq|\\geq|\\neq|\\pm|\\mp|\bor\b|\band\b")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")
_MATRIX = re.compile(r"^\\begin\{[pbv]?matrix\}(.*)\\end\{[pbv]?matrix\}$", re.S)

logging.getLogger("math_verify").setLevel(logging.ERROR)
logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)


def split_top_level(s: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside any brackets."""
    parts, depth, cur = [], 0, []
    for c in s:
        depth += c in "([{"
        depth -= c in ")]}"
        if c == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur).strip())
    return parts


def _closes_at_end(s: str) -> bool:
    """True when the bracket opened at s[0] closes at s[-1] (so `(1)(2)` is not one group)."""
    depth = 0
    for i, c in enumerate(s):
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and i < len(s) - 1:
            return False
    return True


def structure(s: str) -> tuple[str, list[str]]:
    """Classify an answer: ("set", items), ("seq(]", items), ("list", items), ("matrix", rows) or ("scalar", [s])."""
    m = _MATRIX.match(s)
    if m:
        rows = [r for r in m.group(1).split("\\\\") if r.strip()]
        return "matrix", [" & ".join(c.strip() for c in r.split("&")) for r in rows]
    if "\\cup" in s:
        return "union", [p.strip() for p in s.split("\\cup")]
    if s.startswith("\\{") and s.endswith("\\}"):
        return "set", split_top_level(s[2:-2])
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _closes_at_end(s):
        items = split_top_level(s[1:-1])
        if len(items) > 1:
            return f"seq{s[0]}{s[-1]}", items
    items = split_top_level(s)
    if len(items) > 1:
        return "list", items
    return "scalar", [s]


def to_expr(s: str) -> sympy.Expr:
    """Safe parser first; math-verify's LaTeX parser (signal timeouts off) when the grammar is not ours."""
    try:
        return parse_math(s)
    except Unparsable:
        pass
    from math_verify import LatexExtractionConfig, parse

    parsed = parse(f"${s}$", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    exprs = [p for p in parsed if isinstance(p, sympy.Basic)]
    if not exprs:
        raise Unparsable(f"cannot parse {s!r}")
    return exprs[0]


def exprs_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Exact for rationals, relative tolerance for other numbers, simplification for symbolic expressions."""
    if a == b:
        return True
    if getattr(a, "is_number", False) and getattr(b, "is_number", False):
        if a.is_Rational and b.is_Rational:
            return False
        try:
            x, y = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
        except (TypeError, ValueError):
            return False
        return abs(x - y) <= REL_TOL * max(abs(x), abs(y)) or (x == y)
    if getattr(a, "free_symbols", set()) != getattr(b, "free_symbols", set()):
        return False
    diff = sympy.expand(a - b)
    if diff == 0:
        return True
    return sympy.count_ops(diff) <= 80 and sympy.simplify(diff) == 0


def scalars_equal(pred: str, gt: str) -> bool:
    """Compare two scalar answers; raises Unparsable when the prediction cannot be read."""
    if compact(pred) == compact(gt):
        return True
    if _RELATION.search(pred) or _RELATION.search(gt):
        return False  # candidate lists and inequalities only match by identical text
    try:
        g = to_expr(gt)
    except (Unparsable, Rejected):
        return False
    return exprs_equal(to_expr(pred), g)


def answers_equal(pred: str, gt: str) -> bool:
    """Full equivalence of normalized answers (see the module docstring)."""
    if compact(pred) == compact(gt):
        return True
    choice = _CHOICE.match(gt.strip())
    if choice:
        p = _CHOICE.match(re.sub(r"\\text\{(.*)\}", r"\1", pred).strip())
        return bool(p) and p.group(1).upper() == choice.group(1).upper()
    kind_p, items_p = structure(pred)
    kind_g, items_g = structure(gt)
    if kind_g == "list" and kind_p == "set" or kind_g == "set" and kind_p == "list":
        kind_p = kind_g
    if kind_p != kind_g or len(items_p) != len(items_g):
        return False
    if kind_g == "scalar":
        return scalars_equal(items_p[0], items_g[0])
    if kind_g in ("set", "list"):
        return _unordered_equal(items_p, items_g)
    if kind_g == "matrix":
        return all(_unordered_cells(rp, rg) for rp, rg in zip(items_p, items_g))
    return all(answers_equal(p, g) for p, g in zip(items_p, items_g))


def _unordered_cells(row_p: str, row_g: str) -> bool:
    cells_p, cells_g = row_p.split(" & "), row_g.split(" & ")
    return len(cells_p) == len(cells_g) and all(answers_equal(p, g) for p, g in zip(cells_p, cells_g))


def _unordered_equal(items_p: list[str], items_g: list[str]) -> bool:
    remaining = list(items_g)
    for p in items_p:
        match = next((g for g in remaining if _safe_equal(p, g)), None)
        if match is None:
            return False
        remaining.remove(match)
    return True


def _safe_equal(p: str, g: str) -> bool:
    try:
        return answers_equal(p, g)
    except (Unparsable, Rejected):
        return False
