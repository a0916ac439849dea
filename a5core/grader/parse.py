"""A small, safe LaTeX/plain-math parser that builds sympy objects directly (never eval/sympify).

Grammar: sums and differences, products (explicit `*`, `\\cdot`, `\\times`, `/`, `\\div`, and implicit),
unary signs, powers (one level only: a power tower is refused), postfix factorial `n!`, `\\frac`,
`\\sqrt[n]{}`, `\\binom`, `\\exp`, `\\pi`, `\\infty`, Greek letters, single-letter symbols with optional
subscripts, parentheses and braces.

One answer is one value: implicit multiplication never takes a bare number or a brace group as its right
factor (`5 0`, `x2` and `2{5}` are unparsable, not 0, 2x or 10), a mixed number is read only as a whole
answer (`2\\frac{1}{2}` is 5/2, `2\\frac{1}{2}x` is unparsable), `3!!` is refused, and a run of three or more
letters is a word, not a product of symbols (so `Devon` cannot be matched by `voDen`). `|x|` as a whole
answer is the absolute value. Work is bounded
through `a5core.grader.bounds`: digits, exponents, factorial/binomial arguments and every magnitude are
capped, so each parse finishes quickly.
"""

from __future__ import annotations

import re

import sympy

from a5core.grader.bounds import Rejected, check_value, safe_binomial, safe_exp, safe_factorial, safe_pow

GREEK = frozenset(
    {"alpha", "beta", "gamma", "delta", "theta", "lambda", "mu", "phi", "omega", "sigma", "tau", "rho", "epsilon"}
)
_SINGLE = frozenset("+-*/^(){}[]!")
_EXPLICIT_PRODUCT = ("*", "\\cdot", "\\times")
_EXPLICIT_DIVISION = ("/", "\\div")
_MIXED_NUMBER = re.compile(r"(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")


class Unparsable(ValueError):
    """Text outside the supported grammar (not necessarily wrong math)."""


def _scan_number(s: str, i: int) -> int:
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    if j < len(s) and s[j] == ".":
        j += 1
        while j < len(s) and s[j].isdigit():
            j += 1
    if s[i:j] == ".":
        raise Unparsable("a lone '.'")
    return j


def _scan_subscript(s: str, i: int) -> int:
    """End of `_1`, `_n`, `_{12}` starting at s[i] == '_' (alphanumerics only)."""
    j = i + 1
    braced = j < len(s) and s[j] == "{"
    j += braced
    start = j
    while j < len(s) and s[j].isascii() and s[j].isalnum():
        j += 1
    if j == start or (braced and (j >= len(s) or s[j] != "}")):
        raise Unparsable("malformed subscript")
    return j + braced


def _scan_letters(s: str, i: int, out: list[str]) -> int:
    """A run of letters: one symbol token per letter (the last may carry a subscript); 3+ letters is a word."""
    j = i
    while j < len(s) and s[j].isascii() and s[j].isalpha():
        j += 1
    if j - i >= 3:
        raise Unparsable(f"word {s[i:j][:20]!r} is text, not a product of symbols")
    out.extend(s[i : j - 1])
    if j < len(s) and s[j] == "_":
        end = _scan_subscript(s, j)
        out.append(s[j - 1 : end])
        return end
    out.append(s[j - 1])
    return j


def tokenize(s: str) -> list[str]:
    """Split into numbers, `\\commands`, symbols (with subscripts) and single-character operators.

    A hand-written linear scanner (no backtracking): every step consumes at least one character.
    """
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
        elif c.isdigit() or c == ".":
            j = _scan_number(s, i)
            out.append(s[i:j])
            i = j
        elif c == "\\":
            j = i + 1
            while j < n and s[j].isascii() and s[j].isalpha():
                j += 1
            if j == i + 1:
                raise Unparsable(f"unexpected text at {s[i : i + 10]!r}")
            out.append(s[i:j])
            i = j
        elif c.isascii() and c.isalpha():
            i = _scan_letters(s, i, out)
        elif c in _SINGLE:
            out.append(c)
            i += 1
        else:
            raise Unparsable(f"unexpected text at {s[i : i + 10]!r}")
    return out


def _is_number(tok: str | None) -> bool:
    return tok is not None and (tok[0].isdigit() or tok[0] == ".")


class _Parser:
    def __init__(self, tokens: list[str]):
        self.toks, self.i = tokens, 0
        self.saw_infinity = False  # \infty inside a larger expression (1/\infty = 0) is refused

    def peek(self, ahead: int = 0) -> str | None:
        k = self.i + ahead
        return self.toks[k] if k < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise Unparsable(f"expected {expected or 'more input'}, got {tok!r}")
        self.i += 1
        return tok

    def expr(self) -> sympy.Expr:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> sympy.Expr:
        value = self.unary()
        while True:
            tok = self.peek()
            if tok in _EXPLICIT_PRODUCT:
                self.take()
                value = value * self.unary()
            elif tok in _EXPLICIT_DIVISION:
                self.take()
                value = _divide(value, self.unary())
            elif self._implicit_factor_follows(tok):
                value = value * self.power()
            else:
                return value

    def _implicit_factor_follows(self, tok: str | None) -> bool:
        """Implicit multiplication: never with a bare number on the right (`5 0`, `x2`), never a mixed
        number (`2\\frac{1}{2}` is 2.5 to a reader and 1 to a parser)."""
        if tok is None or _is_number(tok) or tok in _EXPLICIT_PRODUCT + _EXPLICIT_DIVISION:
            return False
        if tok == "{":
            raise Unparsable("a brace group as a factor renders as digits (`2{5}` reads 25)")
        if not (tok[0].isalpha() or tok in ("(", "{") or tok.startswith("\\")):
            return False
        if tok == "\\frac" and _is_number(self.peek(-1)) and _is_number(self.peek(2)) and _is_number(self.peek(5)):
            raise Unparsable("mixed numbers are ambiguous")
        return True

    def unary(self) -> sympy.Expr:
        if self.peek() in ("-", "+"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> sympy.Expr:
        base = self.atom()
        if self.peek() == "!":
            self.take()
            if self.peek() == "!":
                raise Unparsable("`n!!` (double or repeated factorial) is not graded")
            base = safe_factorial(base)
        if self.peek() != "^":
            return base
        self.take()
        start = self.i
        exponent = self.group_or_atom()
        if "^" in self.toks[start : self.i] or self.peek() == "^":
            raise Rejected("power towers are not graded")
        return safe_pow(base, exponent)

    def group_or_atom(self) -> sympy.Expr:
        if self.peek() == "{":
            self.take()
            value = self.expr()
            self.take("}")
            return value
        if self.peek() in ("-", "+"):
            return -self.group_or_atom() if self.take() == "-" else self.group_or_atom()
        return self.atom()

    def atom(self) -> sympy.Expr:
        tok = self.take()
        if _is_number(tok):
            return _number(tok)
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        if tok.startswith("\\"):
            return self._command(tok)
        if tok[0].isalpha():
            return sympy.Symbol(tok.replace("{", "").replace("}", ""))
        raise Unparsable(f"unsupported token {tok!r}")

    def _command(self, tok: str) -> sympy.Expr:
        if tok == "\\frac":
            num = self.group_or_atom()
            return _divide(num, self.group_or_atom())
        if tok == "\\sqrt":
            return self._sqrt()
        if tok == "\\binom":
            n = self.group_or_atom()
            return safe_binomial(n, self.group_or_atom())
        if tok == "\\exp":
            return safe_exp(self.group_or_atom())
        if tok == "\\pi":
            return sympy.pi
        if tok == "\\infty":
            self.saw_infinity = True
            return sympy.oo
        if tok[1:] in GREEK:
            return sympy.Symbol(tok[1:])
        raise Unparsable(f"unsupported token {tok!r}")

    def _sqrt(self) -> sympy.Expr:
        index = sympy.Integer(2)
        if self.peek() == "[":
            self.take()
            index = self.expr()
            self.take("]")
            if index == 0:
                raise Unparsable("zeroth root")
        radicand = self.group_or_atom()
        return safe_pow(radicand, 1 / index)


def _divide(num: sympy.Expr, den: sympy.Expr) -> sympy.Expr:
    if den == 0:
        raise Unparsable("division by zero")
    return num / den


def _number(tok: str) -> sympy.Expr:
    """An exact Integer or Rational (decimals are exact: `0.1` is 1/10, never a binary float)."""
    return sympy.Rational(tok) if "." in tok else sympy.Integer(tok)


def mixed_number(text: str) -> sympy.Rational | None:
    """`2\\frac{1}{2}` -> 5/2 when the whole text is an integer and a proper fraction of integers, else None."""
    m = _MIXED_NUMBER.fullmatch("".join(text.split()))
    if not m:
        return None
    whole, num, den = (int(g) for g in m.groups()[1:])
    if whole < 1 or not 0 < num < den:
        return None
    value = sympy.Integer(whole) + sympy.Rational(num, den)
    return -value if m.group(1) else value


def parse_math(text: str) -> sympy.Expr:
    """Parse a normalized, screened answer into a bounded sympy expression, or raise Unparsable/Rejected."""
    mixed = mixed_number(text)
    if mixed is not None:
        return mixed
    inner = text.strip()
    if len(inner) > 2 and inner[0] == inner[-1] == "|" and inner.count("|") == 2:
        return sympy.Abs(parse_math(inner[1:-1]))
    tokens = tokenize(text)
    if not tokens:
        raise Unparsable("empty")
    parser = _Parser(tokens)
    value = parser.expr()
    if parser.peek() is not None:
        raise Unparsable(f"trailing input at token {parser.peek()!r}")
    if parser.saw_infinity:
        raise Rejected("non-finite value")
    check_value(value)
    return value
