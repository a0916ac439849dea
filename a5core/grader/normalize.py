"""Screening and string normalization of final answers (before any parsing).

`screen` rejects inputs whose evaluation could be unbounded or that are not math at all; `normalize`
rewrites the MATH conventions (\\dfrac, \\frac12, units in \\text{}, degrees, percent, \\$, thousands
separators, a leading `x =`) into one canonical LaTeX-ish string. Unit stripping only removes `\\text{}`
blocks and known multi-letter unit words after a number, so it can never delete a variable letter.
"""
from __future__ import annotations

import re
import unicodedata

MAX_ANSWER_CHARS = 400
MAX_NESTING = 24


class Rejected(ValueError):
    """The input was refused before parsing (status `rejected_input`)."""


UNIT_WORDS = {
    "cm", "mm", "km", "meter", "meters", "metre", "metres", "inch", "inches", "foot", "feet", "ft", "yard", "yards",
    "mile", "miles", "mph", "kg", "gram", "grams", "pound", "pounds", "lb", "lbs", "ounce", "ounces", "oz",
    "second", "seconds", "sec", "minute", "minutes", "min", "hour", "hours", "hr", "day", "days", "week", "weeks",
    "month", "months", "year", "years", "dollar", "dollars", "cent", "cents", "degree", "degrees", "unit", "units",
    "sq", "square", "cubic", "liter", "liters", "litre", "ml", "percent", "people", "students", "ways", "times",
    "points", "apples", "marbles", "cups", "pages", "books", "cookies", "coins", "tickets", "boxes", "rpm",
}

_ALLOWED = re.compile(r"[A-Za-z0-9\s+\-*/^_(){}\[\]\\.,=<>|:&%$']*")
_TEXT_BLOCK = re.compile(r"\\(?:text|textbf|mbox|mathrm|mathbf|textit|operatorname)\s*\{([^{}]*)\}")


def screen(answer: str) -> str:
    """NFKC-normalize and refuse what must never reach a parser. Raises `Rejected` with the reason."""
    if len(answer) > 4 * MAX_ANSWER_CHARS:  # cheap check before NFKC touches a huge string
        raise Rejected(f"answer longer than {MAX_ANSWER_CHARS} characters")
    s = unicodedata.normalize("NFKC", answer).strip()
    if len(s) > MAX_ANSWER_CHARS:
        raise Rejected(f"answer longer than {MAX_ANSWER_CHARS} characters")
    if any(ord(c) > 127 for c in s):
        raise Rejected("non-ASCII characters")
    if not _ALLOWED.fullmatch(s):
        raise Rejected("characters outside the math alphabet")
    if "**" in s or "__" in s:
        raise Rejected("Python operators are not math notation")
    depth = max_depth = 0
    for c in s:
        depth += c in "({["
        depth -= c in ")}]"
        max_depth = max(max_depth, depth)
    if max_depth > MAX_NESTING:
        raise Rejected(f"nesting deeper than {MAX_NESTING}")
    if re.search(r"\^\s*\{[^{}]*\^|\^\s*[\w.]+\s*\^", s):
        raise Rejected("power towers are not graded")
    return s


def _strip_text_blocks(s: str) -> str:
    def repl(m: re.Match) -> str:
        inner = m.group(1).strip()
        words = inner.replace("^2", "").replace("^3", "").split()
        if words and all(w.lower().strip(".") in UNIT_WORDS for w in words):
            return ""
        return inner

    prev = None
    while prev != s:
        prev, s = s, _TEXT_BLOCK.sub(repl, s)
    return s


def _strip_trailing_unit_words(s: str) -> str:
    """`5 cm` -> `5`; only multi-letter known unit words directly after a number or closing brace."""
    m = re.fullmatch(r"(.*?[\d}])\s*((?:[A-Za-z]+\s*)+)", s)
    if m and all(w.lower() in UNIT_WORDS for w in m.group(2).split()):
        return m.group(1)
    return s


def _fix_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{x}` -> `\\frac{1}{x}`, `\\sqrt2` -> `\\sqrt{2}`."""
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", s)
    return re.sub(r"\\sqrt\s*(\d+|[a-zA-Z])", r"\\sqrt{\1}", s)


def normalize(s: str) -> str:
    """Canonical string of a screened answer (see the module docstring)."""
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(left|right|big|Big|bigg|Bigg)\b", "", s)
    s = re.sub(r"(?<!\\)\\[,;:! ]|~", " ", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree", "", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = _strip_text_blocks(s)
    s = _strip_trailing_unit_words(s.strip())
    s = re.sub(r"^\s*(?:[a-zA-Z]|\\[a-zA-Z]+)\s*=\s*(?=[^=]+$)", "", s)  # a leading `x =`
    s = s.replace("{,}", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s.strip()):
        s = s.replace(",", "")
    s = re.sub(r"(\d)\s*[eE]\s*([+-]?\d+)\b", r"\1\\times10^{\2}", s) if re.search(r"\d[eE][+-]?\d", s) else s
    s = _fix_fracs(s)
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"(?<=\d)\.0+\b(?!\d)", "", s)  # 5.00 -> 5
    return s.rstrip(".").strip()


def compact(s: str) -> str:
    """Whitespace-free form for plain string comparison."""
    return re.sub(r"\s+", "", s)
