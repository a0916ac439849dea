"""Size bounds of the grader: what text may reach a parser, and what values may come out of one.

Every limit here exists so that grading an untrusted answer finishes in bounded time and memory, and so
that no "universal" value (infinity, NaN, an astronomically large number) can equal everything:

* text: digit runs of at most `MAX_DIGITS`; no power towers in any bracket style (`a^{b^c}`, `a^(b^c)`,
  `a^[b^c]`, `a^b^c`), checked in one linear pass over the bracket structure;
* values: every number (literal, intermediate power, factorial, binomial, exponential, final value) has
  magnitude at most `MAX_MAGNITUDE` = 1e100; numeric exponents at most `MAX_EXPONENT`; factorial and
  binomial arguments at most `MAX_COMBINATORIAL`; non-finite values (oo, zoo, nan) are refused;
* math-verify's LaTeX parser is lenient (it reads `2 3` as 5 and `3_0` as 3) and evaluates eagerly, so
  `screen_for_latex` admits only a whitelist of commands, no words, and single-level bounded powers.

Magnitudes are compared with sympy/mpmath numbers (arbitrary exponent range), never Python floats.
"""

from __future__ import annotations

import sympy

MAX_DIGITS = 100  # longest digit run in an answer
MAX_LOG10 = 100  # |value| <= 10**MAX_LOG10 for every number the grader builds
MAX_MAGNITUDE = sympy.Integer(10) ** MAX_LOG10
MAX_EXPONENT = 400  # |numeric exponent| of any power
MAX_RESULT_DIGITS = 2000  # digits of an exact rational power before it is computed
MAX_COMBINATORIAL = 1000  # n in n!, \binom{n}{k}
_NON_FINITE = (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)


class Rejected(ValueError):
    """The input was refused before or during parsing (status `rejected_input`)."""


def matching_brackets(s: str) -> dict[int, int]:
    """Map each opening `({[` to the index of the closer that ends it (any closer: intervals mix them)."""
    stack: list[int] = []
    close: dict[int, int] = {}
    for i, c in enumerate(s):
        if c in "({[":
            stack.append(i)
        elif c in ")}]" and stack:
            close[stack.pop()] = i
    return close


def caret_prefix(s: str) -> list[int]:
    """prefix[k] = number of `^` in s[:k], so "is there a `^` in s[a:b]" costs O(1)."""
    out = [0]
    for c in s:
        out.append(out[-1] + (c == "^"))
    return out


def operand_end(s: str, j: int, close: dict[int, int]) -> int:
    """End (exclusive) of the operand that starts at s[j]: a bracket group, a command with its brace/bracket
    arguments (`\\frac{a}{b}`, `\\sqrt[3]{x}`), a digit run, or one character; a leading sign is included."""
    n = len(s)
    while j < n and s[j] in " +-":
        j += 1
    if j >= n:
        return n
    if s[j] in "({[":
        return close.get(j, n - 1) + 1
    if s[j] == "\\":
        k = j + 1
        while k < n and s[k].isalpha():
            k += 1
        while k < n and s[k] in "{[":
            k = close.get(k, n - 1) + 1
        return max(k, j + 2)
    if s[j].isdigit() or s[j] == ".":
        k = j
        while k < n and (s[k].isdigit() or s[k] == "."):
            k += 1
        return k
    return j + 1


def check_towers(s: str) -> None:
    """Refuse a power whose exponent contains a power or is followed by another `^` (one linear pass)."""
    if "^" not in s:
        return
    close, carets = matching_brackets(s), caret_prefix(s)
    for i, c in enumerate(s):
        if c != "^":
            continue
        end = operand_end(s, i + 1, close)
        if carets[end] - carets[i + 1] > 0:
            raise Rejected("power towers are not graded")
        k = end
        while k < len(s) and s[k] == " ":
            k += 1
        if k < len(s) and s[k] == "^":
            raise Rejected("power towers are not graded")


def check_digit_runs(s: str) -> None:
    """Refuse digit runs longer than MAX_DIGITS (before any integer is built from them)."""
    run = 0
    for c in s:
        run = run + 1 if c.isdigit() else 0
        if run > MAX_DIGITS:
            raise Rejected(f"number longer than {MAX_DIGITS} digits")


def _log10_abs(x: sympy.Expr) -> float:
    """log10|x| of a finite nonzero number, through mpmath (no float overflow)."""
    return float(sympy.log(sympy.Abs(sympy.N(x, 20)), 10).evalf(15))


def safe_pow(base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
    """Build base**exponent only when its value is bounded: |exponent| <= MAX_EXPONENT, the magnitude
    |exponent| * |log10 |base|| <= MAX_LOG10, and an exact rational power has at most MAX_RESULT_DIGITS."""
    if base.has(*_NON_FINITE) or exponent.has(*_NON_FINITE):
        raise Rejected("non-finite value")
    if exponent.is_number:
        e = abs(complex(sympy.N(exponent, 15)))
        if e > MAX_EXPONENT:
            raise Rejected(f"exponent larger than {MAX_EXPONENT}")
        if base.is_number:
            _check_numeric_power(base, exponent, e)
    result = sympy.Pow(base, exponent)
    check_powers(result)
    return result


def _check_numeric_power(base: sympy.Expr, exponent: sympy.Expr, e: float) -> None:
    if base == 0:
        if sympy.re(exponent).is_nonpositive:
            raise Rejected("0 to a non-positive power")
        return
    if e * abs(_log10_abs(base)) > MAX_LOG10:
        raise Rejected(f"power beyond 1e{MAX_LOG10}")
    if base.is_Rational and e * (len(str(abs(base.p))) + len(str(base.q))) > MAX_RESULT_DIGITS:
        raise Rejected("exact power too long to compute")


def check_powers(expr: sympy.Basic) -> None:
    """Refuse any power in `expr` with a numeric exponent beyond MAX_EXPONENT (sympy merges x^a x^b)."""
    for p in expr.atoms(sympy.Pow):
        if p.exp.is_number and p.exp.is_finite is not False and abs(complex(sympy.N(p.exp, 15))) > MAX_EXPONENT:
            raise Rejected(f"exponent larger than {MAX_EXPONENT}")


def _small_integer(x: sympy.Expr, what: str) -> sympy.Integer:
    if not (x.is_Integer and 0 <= x <= MAX_COMBINATORIAL):
        if x.is_number and x.is_integer is not False and abs(complex(sympy.N(x, 15))) > MAX_COMBINATORIAL:
            raise Rejected(f"{what} argument larger than {MAX_COMBINATORIAL}")
        raise Rejected(f"{what} needs a non-negative integer argument")
    return x


def safe_factorial(x: sympy.Expr) -> sympy.Expr:
    """n! for an integer 0 <= n <= MAX_COMBINATORIAL (symbolic n stays unevaluated)."""
    if not x.is_number:
        return sympy.factorial(x)
    return sympy.factorial(_small_integer(x, "factorial"))


def safe_binomial(n: sympy.Expr, k: sympy.Expr) -> sympy.Expr:
    """binom(n, k) for integers 0 <= k, n <= MAX_COMBINATORIAL (symbolic arguments stay unevaluated)."""
    if not (n.is_number and k.is_number):
        return sympy.binomial(n, k)
    return sympy.binomial(_small_integer(n, "binomial"), _small_integer(k, "binomial"))


def safe_exp(x: sympy.Expr) -> sympy.Expr:
    """exp(x) when |Re x| * log10(e) <= MAX_LOG10, so the value stays inside the magnitude cap."""
    if x.has(*_NON_FINITE):
        raise Rejected("non-finite value")
    if x.is_number and abs(float(sympy.re(sympy.N(x, 15)))) > MAX_LOG10 * 2.302585:
        raise Rejected(f"exponential beyond 1e{MAX_LOG10}")
    return sympy.exp(x)


def check_value(expr: object) -> None:
    """Refuse non-finite values, numbers beyond MAX_MAGNITUDE, and huge exponents anywhere in `expr`.

    Numbers are evaluated with mpmath at 30 digits (its exponent range is unbounded, so 1e434 is just a
    number, not an overflow); expressions that cannot be evaluated to a number are left to the comparison.
    """
    if not isinstance(expr, sympy.Basic):
        raise Rejected(f"not a math value: {type(expr).__name__}")
    if expr.has(*_NON_FINITE):
        raise Rejected("non-finite value")
    check_powers(expr)
    for num in expr.atoms(sympy.Number):
        if abs(num) > MAX_MAGNITUDE:
            raise Rejected(f"number beyond 1e{MAX_LOG10}")
    if isinstance(expr, sympy.Expr) and expr.is_number:
        value = sympy.N(expr, 30)
        if value.has(*_NON_FINITE):
            raise Rejected("non-finite value")
        magnitude = sympy.Abs(value)
        if magnitude.is_comparable and magnitude > MAX_MAGNITUDE:
            raise Rejected(f"value beyond 1e{MAX_LOG10}")
