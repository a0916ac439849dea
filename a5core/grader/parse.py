"""A small, safe LaTeX/plain-math parser that builds sympy objects directly (never eval/sympify).

Grammar: sums and differences, products (explicit `*`, `\\cdot`, `\\times`, `/`, `\\div`, and implicit),
unary signs, powers (one level only: a power tower is refused), `\\frac`, `\\sqrt[n]{}`, `\\pi`, `\\infty`,
Greek letters, single-letter symbols with optional subscripts, parentheses and braces. Work is bounded:
integers are capped in digits and numeric powers in exponent size, so every parse finishes quickly.
"""
from __future__ import annotations

import re

import sympy

from a5core.grader.normalize import Rejected

MAX_DIGITS = 60
MAX_EXPONENT = 400
MAX_RESULT_DIGITS = 2000

_TOKEN = re.compile(r"\s*(\d+\.?\d*|\.\d+|\\[a-zA-Z]+|[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?|[-+*/^(){}\[\]])")
_GREEK = {"alpha", "beta", "gamma", "delta", "theta", "lambda", "mu", "phi", "omega", "sigma", "tau", "rho", "epsilon"}


class Unparsable(ValueError):
    """Text outside the supported grammar (not necessarily wrong math)."""


def _tokenize(s: str) -> list[str]:
    pos, out = 0, []
    s = s.strip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise Unparsable(f"unexpected text at {s[pos:pos + 10]!r}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    return out


class _Parser:
    def __init__(self, tokens: list[str]):
        self.toks, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

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
            if tok in ("*", "\\cdot", "\\times"):
                self.take()
                value = value * self.unary()
            elif tok in ("/", "\\div"):
                self.take()
                den = self.unary()
                if den == 0:
                    raise Unparsable("division by zero")
                value = value / den
            elif tok is not None and self._starts_atom(tok):
                value = value * self.power()
            else:
                return value

    def unary(self) -> sympy.Expr:
        if self.peek() in ("-", "+"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> sympy.Expr:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.group_or_atom(allow_power=False)
        return _safe_pow(base, exponent)

    def group_or_atom(self, allow_power: bool = True) -> sympy.Expr:
        if self.peek() == "{":
            self.take()
            value = self.expr() if allow_power else self._exponent_expr()
            self.take("}")
            return value
        if self.peek() == "-":
            self.take()
            return -self.atom()
        return self.atom()

    def _exponent_expr(self) -> sympy.Expr:
        start = self.i
        value = self.expr()
        if "^" in self.toks[start:self.i]:
            raise Rejected("power towers are not graded")
        return value

    @staticmethod
    def _starts_atom(tok: str) -> bool:
        return tok[0].isdigit() or tok[0] == "." or tok[0].isalpha() or tok in ("(", "{") or (
            tok.startswith("\\") and tok not in ("\\cdot", "\\times", "\\div")
        )

    def atom(self) -> sympy.Expr:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return _number(tok)
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        if tok == "\\frac":
            num = self.group_or_atom()
            den = self.group_or_atom()
            if den == 0:
                raise Unparsable("division by zero")
            return num / den
        if tok == "\\sqrt":
            return self._sqrt()
        if tok == "\\pi":
            return sympy.pi
        if tok == "\\infty":
            return sympy.oo
        if tok[1:] in _GREEK:
            return sympy.Symbol(tok[1:])
        if tok[0].isalpha():
            return sympy.Symbol(tok.replace("{", "").replace("}", ""))
        raise Unparsable(f"unsupported token {tok!r}")

    def _sqrt(self) -> sympy.Expr:
        index = sympy.Integer(2)
        if self.peek() == "[":
            self.take()
            index = self.expr()
            self.take("]")
        radicand = self.group_or_atom()
        return _safe_pow(radicand, 1 / index)


def _number(tok: str) -> sympy.Expr:
    digits = tok.replace(".", "")
    if len(digits) > MAX_DIGITS:
        raise Rejected(f"number longer than {MAX_DIGITS} digits")
    return sympy.Rational(tok) if "." in tok else sympy.Integer(tok)


def _safe_pow(base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
    """Refuse numeric powers whose exact value would be huge (bounded time and memory)."""
    if exponent.is_number and base.is_number:
        e = abs(complex(sympy.N(exponent, 15))) if exponent.is_finite else float("inf")
        if e > MAX_EXPONENT:
            raise Rejected(f"exponent larger than {MAX_EXPONENT}")
        b = abs(complex(sympy.N(base, 15))) if base.is_finite else float("inf")
        if b > 1 and e * len(str(int(b))) > MAX_RESULT_DIGITS:
            raise Rejected("power too large to evaluate")
    elif exponent.is_number and exponent.is_finite and abs(complex(sympy.N(exponent, 15))) > MAX_EXPONENT:
        raise Rejected(f"exponent larger than {MAX_EXPONENT}")
    return sympy.Pow(base, exponent)


def parse_math(text: str) -> sympy.Expr:
    """Parse a normalized, screened answer into a sympy expression, or raise Unparsable/Rejected."""
    tokens = _tokenize(text)
    if not tokens:
        raise Unparsable("empty")
    parser = _Parser(tokens)
    value = parser.expr()
    if parser.peek() is not None:
        raise Unparsable(f"trailing input at token {parser.peek()!r}")
    return value
