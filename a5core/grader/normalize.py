"""Normalization, then screening, of final answers (before any parsing).

`prepare(answer)` = `screen(normalize(answer))`. `normalize` first folds Unicode (superscripts and
subscripts become `^{..}` / `_{..}` *before* NFKC, so `3²` is `3^{2}`, never `32`), then rewrites the MATH
conventions (\\dfrac, \\frac12, spacing macros `\\!` `\\,` `\\;` `~` `\\quad`, units in \\text{}, degrees,
percent after and \\$ before a number, thousands separators such as `10,\\!000`, \\varnothing) into one canonical
string. A leading `x =` is left to the comparison (a5core.grader.equivalence), which knows the ground truth.
`screen` then refuses what must never reach a parser (see `a5core.grader.bounds`).

Everything here runs on untrusted text, so it is written as single linear passes or regexes without
nested quantifiers (tests/test_grader_fuzz.py checks both); the raw text is capped at MAX_RAW_CHARS first.
Unit stripping only removes \\text{} blocks of unit words and known multi-letter unit words at the end of
the answer, after a number, so it never deletes a variable letter or an operator (`5\\text{ times }6`,
`\\operatorname{sec}(0)` and `\\mathrm{min}(3,5)` keep their words); `%` and `$` between numbers (`1%2`, `5$6`)
stay, and are refused by `screen`.
"""

from __future__ import annotations

import re
import unicodedata

from a5core.grader.bounds import Rejected, check_digit_runs, check_towers

MAX_RAW_CHARS = 1600  # before normalization (room for \text{}, \!, spacing around a 400-char answer)
MAX_ANSWER_CHARS = 400  # after normalization
MAX_NESTING = 24
_BEFORE_DOLLAR = frozenset({"", "-", "+", "(", "[", "{", ",", "="})
_UNIT_BLOCK_CHARS = 60  # a \text{} block longer than this is never "only unit words"

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_NESTING",
    "MAX_RAW_CHARS",
    "Rejected",
    "compact",
    "fold_unicode",
    "normalize",
    "prepare",
    "screen",
]

UNIT_WORDS = {
    "cm",
    "mm",
    "km",
    "meter",
    "meters",
    "metre",
    "metres",
    "inch",
    "inches",
    "foot",
    "feet",
    "ft",
    "yard",
    "yards",
    "mile",
    "miles",
    "mph",
    "kg",
    "gram",
    "grams",
    "pound",
    "pounds",
    "lb",
    "lbs",
    "ounce",
    "ounces",
    "oz",
    "second",
    "seconds",
    "sec",
    "minute",
    "minutes",
    "min",
    "hour",
    "hours",
    "hr",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "dollar",
    "dollars",
    "cent",
    "cents",
    "degree",
    "degrees",
    "unit",
    "units",
    "sq",
    "square",
    "cubic",
    "liter",
    "liters",
    "litre",
    "ml",
    "percent",
    "people",
    "students",
    "ways",
    "times",
    "points",
    "apples",
    "marbles",
    "cups",
    "pages",
    "books",
    "cookies",
    "coins",
    "tickets",
    "boxes",
    "rpm",
}

# Math symbols NFKC leaves alone; a trailing space keeps `πr` from becoming the command `\pir`.
_SYMBOLS = {
    "\u2212": "-",
    "\u221e": "\\infty ",
    "\u03c0": "\\pi ",
    "\u00d7": "\\times ",
    "\u00b7": "\\cdot ",
    "\u22c5": "\\cdot ",
    "\u00f7": "\\div ",
    "\u221a": "\\sqrt ",
    "\u2264": "\\le ",
    "\u2265": "\\ge ",
    "\u2260": "\\ne ",
    "\u00b1": "\\pm ",
    "\u00b0": "^\\circ ",
    "\u2044": "/",
    "\u2026": "\\ldots ",
}
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 \t\n\r+-*/^_(){}[]\\.,=<>|:&!;'")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])")
_QUAD = re.compile(r"\\q?quad(?![A-Za-z])")
_LEQ_GEQ = re.compile(r"\\([lg]e)q(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf|mathit|operatorname)\s*\{")
_E_NOTATION = re.compile(r"(\d)\s*[eE]\s*([+-]?\d+)\b")
_TRAILING_ZEROS = re.compile(r"(?<=\d)\.0+\b(?!\d)")


def _script_kind(c: str) -> str | None:
    """`^` for a Unicode superscript, `_` for a subscript (by its compatibility decomposition), else None."""
    d = unicodedata.decomposition(c)
    return "^" if d.startswith("<super>") else "_" if d.startswith("<sub>") else None


def _vulgar_fraction(c: str) -> str | None:
    """`½` -> `\\frac{1}{2}` (NFKC would give `1⁄2`, so `3½` would read as 31/2)."""
    if not unicodedata.decomposition(c).startswith("<fraction>"):
        return None
    num, _, den = unicodedata.normalize("NFKC", c).partition("\u2044")
    return f"\\frac{{{num}}}{{{den}}}"


def fold_unicode(s: str) -> str:
    """Map superscript/subscript runs to `^{..}`/`_{..}`, vulgar fractions to \\frac, common math symbols
    to LaTeX, then apply NFKC (fullwidth digits -> ASCII). One pass; ASCII characters take the fast path."""
    out: list[str] = []
    run: list[str] = []
    kind = None
    for c in s:
        k = None if c.isascii() else _script_kind(c)
        if run and k != kind:
            out.append(f"{kind}{{{''.join(run)}}}")
            run = []
        if k is not None:
            kind = k
            run.append(unicodedata.normalize("NFKC", c))
        elif c.isascii():
            out.append(c)
        else:
            out.append(_SYMBOLS.get(c) or _vulgar_fraction(c) or c)
    if run:
        out.append(f"{kind}{{{''.join(run)}}}")
    return unicodedata.normalize("NFKC", "".join(out))


def _spacing(s: str) -> str:
    """Drop `\\!` (negative space: `10,\\!000` is a thousands separator) and turn `\\,` `\\;` `\\:` `\\ `
    `~` `\\quad` into spaces; `\\\\` (a matrix row break) is kept as is."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        nxt = s[i + 1] if i + 1 < n else ""
        if c == "\\" and nxt == "\\":
            out.append("\\\\")
            i += 2
            continue
        if c == "\\" and nxt in ("!", ",", ";", ":", " "):
            out.append("" if nxt == "!" else " ")
            i += 2
            continue
        out.append(" " if c == "~" else c)
        i += 1
    return _QUAD.sub(" ", "".join(out))


def _all_unit_words(inner: str) -> bool:
    words = inner.replace("^2", "").replace("^3", "").split()
    return all(w.lower().strip(".") in UNIT_WORDS for w in words)


def _unit_power_length(s: str, i: int) -> int:
    """Length of a `^2`, `^3`, `^{2}` or `^{3}` at s[i] (square and cubic units), else 0."""
    for suffix in ("^{2}", "^{3}", "^2", "^3"):
        if s.startswith(suffix, i):
            return len(suffix)
    return 0


def _after_number(out: list[str], start: int) -> bool:
    """out[:start] ends, before spaces, with a digit, `}` or `\\pi` (`36\\pi\\text{ cm}^3`); a scan back over spaces
    only. A command is one chunk of `out` per character after its two-character `\\p`, hence the join of three."""
    k = start - 1
    while k >= 0 and not out[k].strip():
        k -= 1
    last = "".join(out[max(0, k - 2) : k + 1]).rstrip()
    return last[-1:].isdigit() or last.endswith(("}", "\\pi"))


def _strip_text_blocks(s: str) -> str:
    """`\\text{..}` (and \\mbox, \\mathrm, ...) -> its content; a block of only unit words at the end of the
    answer, after a number (`5\\text{ cm}`, `20\\text{ cm}^2`), -> nothing.

    One pass with a stack of open groups, so nested blocks cost O(n): a block's content is only inspected
    (joined) when it is at most _UNIT_BLOCK_CHARS long. An escaped brace `\\{` is copied, not counted.
    """
    out: list[str] = []
    stack: list[tuple[bool, int]] = []  # (is a text block, start of its content in `out`)
    tail = len(_drop_final_period(s))  # where the answer ends
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            m = _TEXT_CMD.match(s, i)
            if m:
                stack.append((True, len(out)))
                i = m.end()
                continue
            out.append(s[i : i + 2])
            i += 2
            continue
        if c == "{":
            stack.append((False, len(out)))
        elif c == "}" and stack:
            is_text, start = stack.pop()
            if is_text:
                i += 1
                end = i + _unit_power_length(s, i)  # `20\text{ cm}^2` is 20, not 20^2
                if (
                    end >= tail
                    and len(out) - start <= _UNIT_BLOCK_CHARS
                    and _all_unit_words("".join(out[start:]))
                    and _after_number(out, start)
                ):
                    del out[start:]
                    i = end
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _strip_trailing_unit_words(s: str) -> str:
    """`5 cm` -> `5`: known unit words at the end, directly after a digit or `}` (a linear scan from the end)."""
    end, found = len(s.rstrip()), False
    while end > 0:
        k = end
        while k > 0 and s[k - 1].isascii() and s[k - 1].isalpha():
            k -= 1
        if k == end or (k > 0 and s[k - 1] == "\\"):
            break
        if s[k:end].lower() not in UNIT_WORDS:
            return s
        found, end = True, k
        while end > 0 and s[end - 1].isspace():
            end -= 1
    if found and end > 0 and (s[end - 1].isdigit() or s[end - 1] == "}"):
        return s[:end]
    return s


def _drop_final_period(s: str) -> str:
    """`5.` -> `5` (a sentence's period); an ellipsis `3...` keeps its dots (it is not the number 3)."""
    s = s.rstrip()
    return s[:-1].rstrip() if s.endswith(".") and not s.endswith("..") else s


def _strip_currency_and_percent(s: str) -> str:
    """`\\$5`, `-\\$5`, `5\\%`, `(10\\%, 20\\%)` -> the numbers. A percent sign goes only right after a number
    (or `}`) and before the end, a space or a closer/separator; a dollar sign only before a number and after the
    start, a sign, an opener or a separator. Anything else (`1%2`, `5$6`) stays, and `screen` refuses it."""
    s = _drop_final_period(s.strip())
    out: list[str] = []
    last = ""  # the last non-space character kept
    i, n = 0, len(s)
    while i < n:
        width = 2 if s.startswith(("\\%", "\\$"), i) else 1 if s[i] in "%$" else 0
        if width:
            after = s[i + width : i + width + 1]
            nxt = s[i + width :].lstrip()[:1] if after == " " else after
            if s[i + width - 1] == "%" and (last.isdigit() or last == "}") and after in ("", " ", ",", ")", "]", "}"):
                i += width
                continue
            if s[i + width - 1] == "$" and last in _BEFORE_DOLLAR and (nxt.isdigit() or nxt == "."):
                i += width
                continue
        out.append(s[i])
        last = s[i] if not s[i].isspace() else last
        i += 1
    return "".join(out).strip()


def _drop_thousands_separators(s: str) -> str:
    """`-12,345,678.5` -> `-12345678.5`; only when every group after the first has exactly three digits."""
    t = s.strip()
    body = t.removeprefix("-")
    whole, dot, frac = body.partition(".")
    groups = whole.split(",")
    if len(groups) < 2 or (dot and not _digits(frac)) or not 1 <= len(groups[0]) <= 3 or groups[0][0] == "0":
        return s
    if all(_digits(g) for g in groups) and all(len(g) == 3 for g in groups[1:]):
        return t.replace(",", "")
    return s


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


def _fix_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{x}` -> `\\frac{1}{x}`, `\\sqrt2` -> `\\sqrt{2}`; like LaTeX, one digit
    per argument (`\\sqrt23` is `\\sqrt{2}3`, never `\\sqrt{23}`)."""
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", s)
    return re.sub(r"\\sqrt\s*(\d|[a-zA-Z])", r"\\sqrt{\1}", s)


def normalize(s: str) -> str:
    """Canonical string of an answer (see the module docstring). Raises `Rejected` for over-long text."""
    if len(s) > MAX_RAW_CHARS:  # cheap check before any pass touches a huge string
        raise Rejected(f"answer longer than {MAX_RAW_CHARS} characters")
    s = fold_unicode(s).strip().strip("$").strip()
    s = _spacing(_LEFT_RIGHT.sub("", s))
    for old, new in (
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\dbinom", "\\binom"),
        ("\\tbinom", "\\binom"),
        ("\\displaystyle", ""),
        ("\\varnothing", "\\emptyset"),
    ):
        s = s.replace(old, new)
    s = _LEQ_GEQ.sub(r"\\\1", _DEGREES.sub("", s))
    s = _strip_text_blocks(s)
    s = _strip_currency_and_percent(_strip_trailing_unit_words(s.strip()))
    s = _drop_thousands_separators(s.replace("{,}", ""))
    if re.search(r"\d[eE][+-]?\d", s):
        s = _E_NOTATION.sub(r"\1\\times10^{\2}", s)
    s = " ".join(_fix_fracs(s).split())
    s = _TRAILING_ZEROS.sub("", s)  # 5.00 -> 5
    s = _drop_final_period(s).strip()
    return "\\emptyset" if compact(s) == "\\{\\}" else s


def screen(s: str) -> str:
    """Refuse a normalized answer that must never reach a parser. Raises `Rejected` with the reason."""
    if len(s) > MAX_ANSWER_CHARS:
        raise Rejected(f"answer longer than {MAX_ANSWER_CHARS} characters")
    if not s.isascii():
        raise Rejected("non-ASCII characters")
    if not _ALPHABET.issuperset(s):
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
    check_digit_runs(s)
    check_towers(s)
    return s


def prepare(answer: str) -> str:
    """normalize, then screen: the only way untrusted answer text reaches the parsers."""
    return screen(normalize(answer))


def compact(s: str) -> str:
    """Whitespace-free form for plain string comparison."""
    return "".join(s.split())
