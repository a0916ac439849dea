"""The gate in front of latex2sympy (math-verify's LaTeX parser), and the call through it.

latex2sympy is lenient and eager: it reads `2 3` as 5, `3_0` and `\\ldots 3` as 3, an equation as its
right-hand side, `(2)(3)` and `2\\sqrt{4}` as sums (its "mixed numbers"), and it evaluates `\\Gamma(10^6)` or
`9^{9^9}` while building the expression. So text reaches it only when the safe parser cannot read it *and*
it passes `screen_for_latex`:

* it uses at least one whitelisted command the safe parser lacks (trig, log, floor/ceil, \\mathbb, ...)
  and no command outside the whitelist (no \\Gamma, \\binom, \\sum, \\lim, ...);
* no relation, separator, factorial or prime characters, no words (3+ letters), no `_` after a number,
  no two numbers separated only by spaces;
* no juxtaposition whose rendering is not its product: `5{6}` and `{5}{6}` render as 56, `\\frac{1}{2}3`,
  `x^{2}3` and `x2` are ambiguous, `2\\frac{1}{2}` reads as a mixed number;
* every power is one level: the base is a letter, a number, a constant or a bracket group without `^`; the
  exponent is read by the safe parser and bounded by MAX_EXPONENT, and a numeric base is bounded like the
  safe parser's (|exponent| * |log10 |base|| <= MAX_LOG10), any other base by MAX_OPAQUE_EXPONENT;
* `\\exp`, `\\sinh`, `\\cosh` arguments are read by the safe parser and bounded by MAX_EXP_ARGUMENT, and
  `\\sqrt[n]` indices are numbers with |1/n| <= MAX_EXPONENT, so no value needs millions of digits;
* brackets nest at most MAX_LATEX_NESTING deep (the ANTLR parser slows down with depth).

latex2sympy is called directly, without math-verify's text normalization (which drops unit letters: `5 m`
would be 5) and with juxtaposition always read as a product (`(2)(3)` is 6, `2\\frac{1}{2}` would be 1, which
is why a number before `\\frac` is refused). The letters of the text must be exactly the free symbols of the
result. The call itself is bounded by the killable grader worker it runs in (a5core.grader.pool).
"""

from __future__ import annotations

import functools
import logging
import math

import sympy

from a5core.grader.bounds import (
    MAX_EXPONENT,
    MAX_LOG10,
    Rejected,
    caret_prefix,
    check_value,
    matching_brackets,
    operand_end,
)
from a5core.grader.parse import GREEK, Unparsable, parse_math

SAFE_COMMANDS = frozenset({"frac", "sqrt", "pi", "cdot", "times", "div", "exp"}) | GREEK
LATEX_ONLY = frozenset(
    {
        "sin",
        "cos",
        "tan",
        "sec",
        "csc",
        "cot",
        "arcsin",
        "arccos",
        "arctan",
        "sinh",
        "cosh",
        "tanh",
        "log",
        "ln",
        "lg",
        "lfloor",
        "rfloor",
        "lceil",
        "rceil",
        "mathbb",
        "emptyset",
    }
)
MAX_LATEX_NESTING = 10  # ANTLR's prediction slows with depth (~3 s at 23 nested `\sin(`)
MAX_EXP_ARGUMENT = 230  # e^230 ~ 1e100 (MAX_MAGNITUDE)
MAX_OPAQUE_EXPONENT = 10  # |exponent| of a base the safe parser cannot read (`\cosh^{2}(x)`, `(\sin x)^3`)
_EXP_LIKE = frozenset({"exp", "sinh", "cosh"})
_FORBIDDEN = frozenset("!=<>,;:&'|\"")
_NO_BASE = frozenset({"rfloor", "rceil"})  # `\lfloor x \rfloor^2`: the base would need a second bracket matcher
_CONSTANTS = frozenset({"pi", "emptyset"}) | GREEK
_BRACE_ARGS = {"frac": 2, "mathbb": 1}  # every other function takes one optional brace argument

logging.getLogger("math_verify").setLevel(logging.ERROR)
logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)


def _commands_and_words(s: str) -> list[str]:
    """Names of all `\\commands`; raises Unparsable on a run of 3+ letters that is not a command name."""
    names, i, n = [], 0, len(s)
    while i < n:
        j = i + 1 if s[i] == "\\" else i
        k = j
        while k < n and s[k].isascii() and s[k].isalpha():
            k += 1
        if s[i] == "\\":
            names.append(s[j:k])
        elif k - j >= 3:
            raise Unparsable(f"word {s[j:k][:20]!r} is text")
        i = max(k, i + 1)
    return names


def _check_characters(s: str) -> None:
    """No relations/separators/factorials, no `_` after a number or bracket, no `2 3`."""
    if _FORBIDDEN.intersection(s):
        raise Unparsable("relations, separators and factorials are not sent to the LaTeX parser")
    prev, gap, sub = "", False, False  # previous non-space char, spaces after it, it ends a `_2` subscript
    for c in s:
        if c == " ":
            gap = True
            continue
        if c == "_" and not prev.isalpha():
            raise Unparsable("a subscript on a number is not a value")
        if gap and not sub and (prev.isdigit() or prev == ".") and (c.isdigit() or c == "."):
            raise Unparsable("two numbers side by side are not one value")  # `\log_2 8` is fine
        sub = c.isdigit() and (prev == "_" or (sub and not gap))
        prev, gap = c, False


class _Juxtaposition:
    """One left-to-right pass that knows which brace groups are command arguments (`\\frac{1}{2}`, `x^{2}`,
    `\\log_{2}{8}`, `\\sqrt[3]{x}`) and refuses operands side by side whose rendering is not their product."""

    def __init__(self) -> None:
        self.prev = "op"  # previous token: op, cmd, num, letter, close, sub (ends a subscript), under (`_`)
        self.expect = 0  # brace arguments the previous command still takes
        self.saved = 0  # `expect` before a `_`, restored after the subscript
        self.sqrt = False  # the previous token was \sqrt (its `[n]` index may follow)
        self.stack: list[tuple[int, str]] = []  # per open bracket: (expect, prev) once it closes

    def run(self, s: str) -> None:
        i, n = 0, len(s)
        while i < n:
            c, j = s[i], i + 1
            if c == "\\":
                while j < n and s[j].isascii() and s[j].isalpha():
                    j += 1
                self.command(s[i + 1 : j])
            elif c.isdigit() or c == ".":
                while j < n and (s[j].isdigit() or s[j] == "."):
                    j += 1
                self.operand("num")
            elif c.isalpha():
                self.operand("letter")
            elif c in "{[(":
                self.open(c)
            elif c in "}])":
                self.close()
            elif c == "_":
                self.prev, self.saved, self.expect = "under", self.expect, 0
            elif c != " ":
                self.prev, self.expect = "op", int(c == "^")
            if c != " ":
                self.sqrt = self.sqrt and c == "\\"
            i = j

    def operand(self, kind: str) -> None:
        if self.prev == "under":
            self.prev, self.expect = "sub", self.saved
            return
        if kind == "num" and self.prev in ("close", "letter"):
            raise Unparsable("a number right after a group or a letter is ambiguous (`\\frac{1}{2}3`, `x2`)")
        self.prev, self.expect = kind, 0

    def command(self, name: str) -> None:
        if name == "frac" and self.prev == "num":
            raise Unparsable("a number before \\frac reads as a mixed number")
        if name in ("lfloor", "lceil"):
            self.open("(")
        elif name in ("rfloor", "rceil"):
            self.close()
        elif name in ("cdot", "times", "div"):
            self.prev, self.expect = "op", 0
        elif name in _CONSTANTS:
            self.operand("letter")
        else:
            self.prev, self.expect, self.sqrt = "cmd", _BRACE_ARGS.get(name, 1), name == "sqrt"

    def open(self, c: str) -> None:
        if self.prev == "under":
            self.stack.append((self.saved, "sub"))
        elif c == "{" and self.expect > 0:
            self.stack.append((self.expect - 1, "close"))
        elif c == "[" and self.sqrt:
            self.stack.append((self.expect, "close"))
        elif c == "{" and self.prev in ("num", "close", "sub", "letter"):
            raise Unparsable("a brace group right after an operand renders as one number (`5{6}`, `{5}{6}`)")
        else:
            self.stack.append((0, "close"))
        self.prev, self.expect = "op", 0

    def close(self) -> None:
        self.expect, self.prev = self.stack.pop() if self.stack else (0, "close")


def _base_text(s: str, i: int, opener: dict[int, int], carets: list[int]) -> str | None:
    """The base of the `^` at s[i] as text the safe parser may read, None when it is opaque (a function name,
    a command argument such as `\\frac{1}{2}^{3}`); refuses a missing, tower or unsupported base."""
    j = i - 1
    while j >= 0 and s[j] == " ":
        j -= 1
    if j < 0:
        raise Unparsable("a power without a base")
    if s[j] in ")}]":
        start = opener.get(j, 0)
        if carets[j] - carets[start] > 0:
            raise Rejected("power towers are not graded")
        k = start - 1
        while k >= 0 and s[k] == " ":
            k -= 1
        opaque = k >= 0 and (
            s[k] in "}]_^" or (s[k].isalpha() and s[: k + 1].rstrip("abcdefghijklmnopqrstuvwxyz").endswith("\\"))
        )
        return None if opaque else s[start : j + 1]
    k = j
    while k >= 0 and s[k].isascii() and s[k].isalpha():
        k -= 1
    if k >= 0 and s[k] == "\\":
        if s[k + 1 : j + 1] in _NO_BASE:
            raise Unparsable("a bracketed function as the base of a power")
        return s[k : j + 1] if s[k + 1 : j + 1] in _CONSTANTS else None
    if not (s[j].isalnum() or s[j] == "."):
        raise Unparsable("unsupported base of a power")
    while k >= 0 and (s[k].isdigit() or s[k] == ".") and s[j].isdigit():
        k -= 1
    return s[k + 1 : j + 1] if s[j].isdigit() or s[j] == "." else s[j]


def _safe_value(text: str) -> sympy.Expr:
    """`text` (outer braces dropped) read by the safe parser; Unparsable/Rejected propagate."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    return parse_math(text)


def _magnitude(value: sympy.Expr) -> float:
    return abs(complex(sympy.N(value, 15)))


def _check_power(s: str, i: int, close: dict[int, int], opener: dict[int, int], carets: list[int]) -> None:
    """The `^` at s[i]: a readable exponent bounded by MAX_EXPONENT and a bounded value (module docstring)."""
    base = _base_text(s, i, opener, carets)
    exponent = _safe_value(s[i + 1 : operand_end(s, i + 1, close)])
    if not exponent.is_number:
        return
    e = _magnitude(exponent)
    if e > MAX_EXPONENT:
        raise Rejected(f"exponent larger than {MAX_EXPONENT}")
    if e <= MAX_OPAQUE_EXPONENT:
        return
    try:
        value = _safe_value(base) if base is not None else None
    except Unparsable:
        value = None
    if value is None:
        raise Rejected(f"exponent larger than {MAX_OPAQUE_EXPONENT} on a base the safe parser cannot read")
    magnitude = _magnitude(value) if value.is_number else 0.0
    if magnitude and e * abs(math.log10(magnitude)) > MAX_LOG10:  # values are within 1e+-100: floats suffice
        raise Rejected(f"power beyond 1e{MAX_LOG10}")


def _check_exp_arguments(s: str, close: dict[int, int]) -> None:
    """`\\exp(x)`, `\\sinh x`, `\\cosh{x}`: the argument is read by the safe parser; a number is at most
    MAX_EXP_ARGUMENT, a symbolic one has small numbers and powers (its values at sample points stay small)."""
    i = s.find("\\")
    while i >= 0:
        k = i + 1
        while k < len(s) and s[k].isascii() and s[k].isalpha():
            k += 1
        if s[i + 1 : k] in _EXP_LIKE:
            arg = _safe_value(s[k : operand_end(s, k, close)])
            if arg.is_number and _magnitude(arg) > MAX_EXP_ARGUMENT:
                raise Rejected(f"exponential argument beyond {MAX_EXP_ARGUMENT}")
            if not arg.is_number and (
                any(abs(x) > 20 for x in arg.atoms(sympy.Number))
                or any(not p.exp.is_number or abs(p.exp) > 2 for p in arg.atoms(sympy.Pow))
            ):
                raise Rejected("symbolic exponential argument with large numbers or powers")
        i = s.find("\\", k)


def _check_root_indices(s: str, close: dict[int, int]) -> None:
    """`\\sqrt[n]{x}`: n is a nonzero number with |1/n| <= MAX_EXPONENT."""
    i = s.find("\\sqrt")
    while i >= 0:
        k = i + len("\\sqrt")
        while k < len(s) and s[k] == " ":
            k += 1
        if k < len(s) and s[k] == "[":
            index = _safe_value(s[k + 1 : close.get(k, len(s))])
            if not index.is_number or _magnitude(index) * MAX_EXPONENT < 1:
                raise Rejected("a root index must be a number n with |1/n| <= MAX_EXPONENT")
        i = s.find("\\sqrt", k)


def _depth(s: str) -> int:
    depth = deepest = 0
    for c in s:
        depth += c in "({["
        depth -= c in ")}]"
        deepest = max(deepest, depth)
    return deepest


def screen_for_latex(s: str) -> None:
    """Raise Unparsable/Rejected unless `s` may be handed to latex2sympy (see the module docstring)."""
    names = _commands_and_words(s)
    if not any(n in LATEX_ONLY for n in names):
        raise Unparsable("outside the grammar")
    unknown = [n for n in names if n not in LATEX_ONLY and n not in SAFE_COMMANDS]
    if unknown:
        raise Unparsable(f"unsupported command \\{unknown[0]}")
    _check_characters(s)
    _Juxtaposition().run(s)
    if _depth(s) > MAX_LATEX_NESTING:
        raise Rejected(f"brackets nested deeper than {MAX_LATEX_NESTING} for the LaTeX parser")
    close = matching_brackets(s)
    _check_exp_arguments(s, close)
    _check_root_indices(s, close)
    if "^" in s:
        carets = caret_prefix(s)
        opener = {c: o for o, c in close.items()}
        for i, c in enumerate(s):
            if c == "^":
                _check_power(s, i, close, opener, carets)


def text_symbols(s: str, euler: bool = True) -> set[str]:
    """Names the text uses as variables: single letters outside commands and subscripts, Greek commands
    (`e` is left out when `euler`: it is Euler's number to latex2sympy); \\mathbb arguments are skipped."""
    out, i, n = set(), 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            k = i + 1
            while k < n and s[k].isascii() and s[k].isalpha():
                k += 1
            name = s[i + 1 : k]
            out.update({name} & GREEK)
            skip = name == "mathbb" and k < n and s[k] == "{"
            i = s.find("}", k) + 1 if skip and "}" in s[k:] else k
        elif c == "_":
            i = (s.find("}", i) + 1 or n) if s.startswith("_{", i) else i + 2
        else:
            if c.isascii() and c.isalpha() and (c != "e" or not euler):
                out.add(c)
            i += 1
    return out


def _exact_decimals(expr: sympy.Basic) -> sympy.Basic:
    """latex2sympy reads `0.1` as a binary Float; compare exactly instead (Float('0.1') -> 1/10)."""
    floats = expr.atoms(sympy.Float)
    return expr.xreplace({f: sympy.Rational(str(f)) for f in floats}) if floats else expr


@functools.cache
def _products_converter() -> type:
    """latex2sympy's converter, reading every juxtaposition as a product (imported on first use)."""
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    class Products(_Latex2Sympy):
        def convert_postfix_list(self, arr, i=0):  # the original adds `2 (3)` and `2\frac{1}{2}` as mixed numbers
            res = self.convert_postfix(arr[i])
            if i == len(arr) - 1:
                return res
            if not isinstance(res, sympy.Expr):
                raise Unparsable("derivatives and matrices are not graded")
            return self.mul_flat(res, self.convert_postfix_list(arr, i + 1))

    return Products


def _latex2sympy(s: str) -> sympy.Basic:
    """latex2sympy without math-verify's text normalization."""
    from math_verify.grader import should_treat_as_complex

    return _products_converter()(is_real=not should_treat_as_complex(s), convert_degrees=False).parse(s)


def parse_latex(s: str) -> sympy.Basic:
    """latex2sympy behind the gate; its result is bounded like the safe parser's, with plain symbols."""
    screen_for_latex(s)
    try:
        expr = _latex2sympy(s)
    except (Unparsable, Rejected):
        raise
    except Exception as err:  # the parser's own syntax errors
        raise Unparsable(f"cannot parse {s[:40]!r}: {type(err).__name__}") from None
    if not isinstance(expr, sympy.Basic):
        raise Unparsable(f"cannot parse {s[:40]!r}")
    expr = _exact_decimals(expr)
    names = {str(x).split("_")[0] for x in expr.free_symbols} - {"e"}
    if names != text_symbols(s) or expr.atoms(sympy.core.function.AppliedUndef):
        raise Unparsable("the LaTeX parser read other variables than the text has")
    expr = expr.xreplace({x: sympy.Symbol(x.name) for x in expr.free_symbols})
    check_value(expr)
    return expr
