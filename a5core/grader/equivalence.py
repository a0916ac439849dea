"""Are two normalized answers equivalent, as MATH graders judge it?

Order of checks: identical strings -> a leading `x =` (dropped when the other side has no `=` and `x` is
not on the right, or when both sides name the same variable; an equation such as `y = 2x+1` needs a ground
truth without letters on its right to lose its `y =`) -> multiple-choice letters (only an uppercase or
parenthesized ground truth is a choice) -> structure (tuples and intervals are ordered and their brackets must
match, sets and bare comma lists are unordered, matrices elementwise, a `vmatrix` only equals a `vmatrix`) ->
scalars: infinity literals match only the same infinity literal of the ground truth; text with a relation,
an equation, `\\pm`, `or`/`and` or an ellipsis is compared by text only, and so is a ground truth of letters
only (`no`, `Evelyn`; case-insensitively from three letters on, and for `no`), never read as a product of
symbols; otherwise both sides are parsed (safe parser, else latex2sympy behind `a5core.grader.latex_gate`)
into bounded, finite sympy values.

Values are compared exactly: rationals by equality; other numbers are first *refuted* numerically (40
digits; a relative gap over 1e-20 means different) and only *accepted* when sympy proves the difference is
zero (expand/simplify/equals). Decimals are exact rationals, so `3.14` is not `\\pi` and `1.41421356` is
not `\\sqrt{2}`. Symbolic expressions must agree at rational sample points and have a
zero difference after expansion or simplification. A proof is skipped (the answers then differ) for powers
of degree over MAX_EXPAND_DEGREE and whenever expansion would produce over MAX_EXPANSION_TERMS terms, as
estimated from the multinomial sizes C(terms + n - 1, n) of every `(sum)^n`, so that no comparison hangs.
Symbolic sides may have different symbols when an identity cancels them (`\\sin^2 x + \\cos^2 x` = 1).
"""

from __future__ import annotations

import functools
import math
import re

import sympy

from a5core.grader.bounds import Rejected
from a5core.grader.latex_gate import parse_latex, text_symbols
from a5core.grader.normalize import compact
from a5core.grader.parse import Unparsable, parse_math

NUMERIC_DIGITS = 40
REFUTE_GAP = sympy.Float("1e-20", NUMERIC_DIGITS)  # relative gap that proves two numbers differ
MAX_EXPAND_DEGREE = 40
MAX_SIMPLIFY_OPS = 80
MAX_EXPANSION_TERMS = 3000  # ~0.2 ms of sympy.expand per term
_TEXT_ONLY = re.compile(
    r"<|>|=|\\le|\\ge|\\ne|\\pm|\\mp|\\approx|\\sim|\\equiv|\\to|\\in(?![a-z])|\\subset|"
    r"\\ldots|\\cdots|\\dots|\\vdots|\\ddots|\.\.\.|\bor\b|\band\b"
)
_CHOICE = re.compile(r"^(?:\(([A-Ea-e])\)|([A-E]))$")  # `(c)`, `(C)` or `C`; a bare `e` is Euler's number
_MATRIX = re.compile(r"^\\begin\{([pbvV]?)matrix\}(.*)\\end\{([pbvV]?)matrix\}$", re.DOTALL)
_MATRIX_KIND = {"": "matrix", "p": "matrix", "b": "matrix", "v": "vmatrix", "V": "Vmatrix"}
_INFINITIES = {"\\infty": "+", "+\\infty": "+", "-\\infty": "-"}


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
    """Classify an answer: ("set", items), ("seq(]", items), ("list", items), ("matrix" / "vmatrix" / "Vmatrix",
    rows) or ("scalar", [s])."""
    m = _MATRIX.match(s)
    if m and m.group(1) == m.group(3):
        rows = [r for r in m.group(2).split("\\\\") if r.strip()]
        return _MATRIX_KIND[m.group(1)], [" & ".join(c.strip() for c in r.split("&")) for r in rows]
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


@functools.lru_cache(maxsize=4096)
def to_expr(s: str) -> sympy.Basic:
    """Safe parser first; math-verify's LaTeX parser (behind its gate) when the grammar is not ours.

    Both results are bounded and finite (a5core.grader.bounds.check_value); cached because the same
    ground truth is parsed for every sample of a problem.
    """
    try:
        return parse_math(s)
    except Unparsable as err:
        safe_err = err
    try:
        return parse_latex(s)
    except Unparsable as err:
        raise Unparsable(f"{safe_err}; LaTeX parser: {err}") from None


def _relative_gap(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """|a - b| / max(|a|, |b|) at NUMERIC_DIGITS digits (mpmath: no overflow), or None if not numeric."""
    va, vb = sympy.N(a, NUMERIC_DIGITS), sympy.N(b, NUMERIC_DIGITS)
    try:
        gap, scale = sympy.Abs(va - vb), sympy.Max(sympy.Abs(va), sympy.Abs(vb))
    except (TypeError, ValueError):  # a value with no significant digits (`\log_2 8 - 3` is 0.e-172): left to the proof
        return None
    if not (gap.is_comparable and scale.is_comparable):
        return None
    return gap / scale if scale != 0 else gap


def expansion_terms(e: sympy.Basic) -> int:
    """An upper estimate of the number of terms `sympy.expand(e)` builds, capped at MAX_EXPANSION_TERMS + 1."""
    cap = MAX_EXPANSION_TERMS + 1
    if e.is_Atom:
        return 1
    if e.is_Pow:  # (a+b+c)^n has C(3 + n - 1, n) terms; a root or a symbolic power is not expanded
        base = expansion_terms(e.base)
        if not e.exp.is_Integer or base == 1:
            return base
        k = abs(int(e.exp))
        return cap if k > 1000 else min(cap, math.comb(base + k - 1, k))
    total = 1 if e.is_Mul else 0
    for arg in e.args:  # a product multiplies the sizes of its factors; sums and functions add them
        total = min(cap, total * expansion_terms(arg) if e.is_Mul else total + expansion_terms(arg))
    return total


def _provably_zero(d: sympy.Expr) -> bool:
    """True only when sympy proves d == 0 (expansion, bounded simplification, or Expr.equals)."""
    if expansion_terms(d) > MAX_EXPANSION_TERMS:
        return False
    d = sympy.expand(d)
    if d == 0:
        return True
    if sympy.count_ops(d) <= MAX_SIMPLIFY_OPS and sympy.simplify(d) == 0:
        return True
    return d.is_number and d.equals(0) is True


def _numbers_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    if a.is_Rational and b.is_Rational:
        return a == b
    gap = _relative_gap(a, b)
    if gap is not None and gap > REFUTE_GAP:
        return False
    return _provably_zero(a - b)


def _sample_points(symbols: list[sympy.Symbol], k: int) -> dict:
    """Distinct, non-integer rational values per symbol (so that x and x^3 or floor(x) differ)."""
    return {s: sympy.Rational(7 + 3 * k + 5 * i, 13 + 2 * k + i) for i, s in enumerate(symbols)}


def _differ_at_points(a: sympy.Expr, b: sympy.Expr) -> bool:
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    for k in range(3):
        point = _sample_points(symbols, k)
        va, vb = a.xreplace(point), b.xreplace(point)
        if (
            not (va.is_number and vb.is_number)
            or va.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
            or vb.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
        ):
            continue
        gap = _relative_gap(va, vb)
        if gap is not None and gap > REFUTE_GAP:
            return True
    return False


def _high_degree(e: sympy.Expr) -> bool:
    return any(p.exp.is_number and not p.base.is_number and abs(p.exp) > MAX_EXPAND_DEGREE for p in e.atoms(sympy.Pow))


def exprs_equal(a: sympy.Basic, b: sympy.Basic) -> bool:
    """Exact equality of bounded values (see the module docstring)."""
    if a == b:
        return True
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return False
    if a.is_number and b.is_number:
        return _numbers_equal(a, b)
    if _differ_at_points(a, b):  # cheap refutation; `x` vs `3` or `x` vs `y` never reach the proof
        return False
    diff = a - b
    if _high_degree(diff) or expansion_terms(diff) > MAX_EXPANSION_TERMS:
        return False
    d = sympy.expand(diff)
    return d == 0 or (sympy.count_ops(d) <= MAX_SIMPLIFY_OPS and sympy.simplify(d) == 0)


def scalars_equal(pred: str, gt: str) -> bool:
    """Compare two scalar answers; raises Unparsable/Rejected when the prediction cannot be read."""
    if compact(pred) == compact(gt):
        return True
    inf_p, inf_g = _INFINITIES.get(compact(pred)), _INFINITIES.get(compact(gt))
    if inf_p or inf_g or "\\infty" in pred or "\\infty" in gt:
        return inf_g is not None and inf_p == inf_g  # only the ground truth's own infinity matches it
    if _TEXT_ONLY.search(pred) or _TEXT_ONLY.search(gt):
        return False  # candidate lists, relations, equations and ellipses only match by identical text
    word = compact(gt)
    if len(word) >= 2 and word.isascii() and word.isalpha():  # `no`, `Evelyn`: text, not a product n*o
        if len(word) >= 3 or word.lower() == "no":
            return compact(pred).lower() == word.lower()
        return False  # identical text was accepted above
    try:
        g = to_expr(gt)
    except (Unparsable, Rejected):
        return False
    return exprs_equal(to_expr(pred), g)


def _assignment(s: str) -> tuple[str, str] | None:
    """(`x`, `3`) for `x = 3`: one `=`, a single Latin letter on the left that does not occur on the right."""
    if s.count("=") != 1:
        return None
    lhs, _, rhs = (t.strip() for t in s.partition("="))
    if len(lhs) == 1 and lhs.isascii() and lhs.isalpha() and rhs and lhs not in text_symbols(rhs, euler=False):
        return lhs, rhs
    return None


def drop_assignments(pred: str, gt: str) -> tuple[str, str]:
    """`x = 3` vs `3` -> `3` vs `3`; `x = 3` vs `x = 3.0` -> the right-hand sides; `y = 3` vs `x = 3` stay (text);
    the ground truth's `y =` is dropped only when its right-hand side has no letters (`y = 2x+1` is a line)."""
    ap, ag = _assignment(pred), _assignment(gt)
    if ap and ag:
        return (ap[1], ag[1]) if ap[0] == ag[0] else (pred, gt)
    if ap and "=" not in gt:
        return ap[1], gt
    if ag and "=" not in pred and not text_symbols(ag[1]):
        return pred, ag[1]
    return pred, gt


def _choice_letter(s: str) -> str | None:
    m = _CHOICE.match(s.strip())
    return (m.group(1) or m.group(2)).upper() if m else None


def answers_equal(pred: str, gt: str) -> bool:
    """Full equivalence of normalized answers (see the module docstring)."""
    if compact(pred) == compact(gt):
        return True
    pred, gt = drop_assignments(pred, gt)
    if compact(pred) == compact(gt):
        return True
    choice = _choice_letter(gt)
    if choice:
        return _choice_letter(re.sub(r"\\text\{(.*)\}", r"\1", pred)) == choice
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
    if kind_g in ("matrix", "vmatrix", "Vmatrix"):
        return all(_unordered_cells(rp, rg) for rp, rg in zip(items_p, items_g, strict=True))
    return all(answers_equal(p, g) for p, g in zip(items_p, items_g, strict=True))


def _unordered_cells(row_p: str, row_g: str) -> bool:
    cells_p, cells_g = row_p.split(" & "), row_g.split(" & ")
    return len(cells_p) == len(cells_g) and all(answers_equal(p, g) for p, g in zip(cells_p, cells_g, strict=True))


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
