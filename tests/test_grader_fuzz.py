"""Adversarial and property-based tests of the grader, the reward's security boundary.

Hypothesis runs derandomized (a fixed example sequence, no example database), so CI is deterministic. The
properties: no call runs past its time limit, no exception escapes a reward function, no model text is ever
executed (a canary file is never created), no answer whose value differs from the ground truth earns 1.0,
and every text-processing entry point (normalize, screen, extraction, tokenizer) runs in linear time.
"""

import ast
import math
import multiprocessing
import pathlib
import re._constants as sre_c
import re._parser as sre_parse
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a5core.grader import (
    GraderPool,
    grade,
    question_only_reward_fn,
    r1_zero_reward_fn,
    r1_zero_strict_reward_fn,
    single,
)
from a5core.grader import pool as pool_mod
from a5core.grader.extract import boxed_contents, extract_question_only, extract_r1_zero, extract_r1_zero_strict
from a5core.grader.normalize import normalize, screen
from a5core.grader.parse import tokenize
from tests.support.hostile_inputs import MACROS

GRADER_DIR = pathlib.Path(__file__).resolve().parents[1] / "a5core" / "grader"
CALL_LIMIT_S = single.SINGLE_CALL_TIMEOUT_S + 1.0  # the bound plus pipe transfer
RULES = ("r1_zero", "r1_zero_strict", "question_only")
REWARD_FNS = (r1_zero_reward_fn, r1_zero_strict_reward_fn, question_only_reward_fn)


def fuzz(n: int):
    return settings(
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=n,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def wrap(answer: str, rule: str) -> str:
    """A well-formatted response for `rule` whose answer is `answer`."""
    if rule == "question_only":
        return f"So the final answer is \\boxed{{{answer}}}."
    return f"<think>work</think> <answer>{answer}</answer>"


@pytest.fixture(scope="module", autouse=True)
def warm_single_call_worker():
    assert grade(wrap("1", "r1_zero"), "1").status == "correct"


# ---------------------------------------------------------------- hostile generators
DIGITS = st.integers(min_value=1, max_value=9).map(str)
SMALL = st.integers(min_value=-(10**6), max_value=10**6)
BIG_NUMBERS = st.one_of(
    st.integers(min_value=10**101, max_value=10**600).map(str),
    st.integers(min_value=101, max_value=10**6).map(lambda k: f"10^{{{k}}}"),
    st.integers(min_value=101, max_value=10**6).map(lambda k: f"1e{k}"),
    st.integers(min_value=233, max_value=10**6).map(lambda k: f"\\exp({k})"),
    st.integers(min_value=1001, max_value=10**9).map(lambda k: f"{k}!"),
    st.integers(min_value=1001, max_value=10**9).map(lambda k: f"\\binom{{{k}}}{{{k // 2}}}"),
    st.integers(min_value=4, max_value=10**6).map(lambda k: f"\\Gamma(10^{{{k}}})"),
)
TOWER_STYLES = (
    "{a}^{{{b}^{{{c}}}}}",
    "{a}^({b}^{c})",
    "{a}^[{b}^{c}]",
    "{a}^\\left({b}^{c}\\right)",
    "{a}^{b}^{c}",
    "{a}^{{({b}^{c})}}",
    "{a}^{{{{{b}}}^{{{c}}}}}",
    "({a}^{b})^{c}",
    "e^{{e^{{{c}}}}}",
    "\\exp(\\exp({c}))",
    "\\lfloor {a}^({b}^{c}) \\rfloor",
    "\\quad \\lfloor {a}^{{{b}^{c}}} \\rfloor",
    "\\sin({a}^{{{b}^{c}}})",
    "{a}^{{{b}!}}",
    "{a}^{{\\binom{{{c}}}{{{b}}}}}",
)
TOWERS = st.builds(
    lambda fmt, a, b, c: fmt.format(a=a, b=b, c=c),
    st.sampled_from(TOWER_STYLES),
    st.integers(2, 99),
    st.integers(5, 99),
    st.integers(9, 9999),
)
OPENERS = ["(", "{", "[", "\\frac{", "\\sqrt{", "\\boxed{", "\\text{"]
DEEP = st.builds(
    lambda k, o, c: o * k + "1" + c * k,
    st.integers(20, 400),
    st.sampled_from(OPENERS),
    st.sampled_from([")", "}", "]"]),
)
CONFUSABLES = "０１２３４５６７８９²³¹⁰⁴⁵⁶⁷⁸⁹⁻⁺₀₁₂₃ⁿ½¼аеорсухіΑΒΕοπ∞−×·√°…\u200b\u200e\u202e\u0301ℵ"
FRAGMENTS = st.one_of(st.sampled_from(MACROS), st.text(alphabet=CONFUSABLES, min_size=1, max_size=3), DIGITS)
SOUP = st.lists(FRAGMENTS, min_size=1, max_size=40).map("".join)
LONG = st.builds(
    lambda unit, k: unit * k,
    st.sampled_from(["1", "a", "1a", "x ", "\\text{", "{,}", "1,", "^", "</answer>", "\\boxed{", "cm ", "\\!", "9^"]),
    st.integers(100, 4000),
)
REPEATED = st.one_of(
    st.lists(SMALL.map(str), min_size=2, max_size=60).map(", ".join),
    st.lists(SMALL.map(str), min_size=2, max_size=20).map(" or ".join),
    st.lists(SMALL.map(str), min_size=2, max_size=20).map(lambda xs: " ".join(f"\\boxed{{{x}}}" for x in xs)),
    st.integers(3, 200).map(lambda k: ", ".join(str(i) for i in range(1, k)) + ", \\ldots"),
)
HOSTILE = st.one_of(BIG_NUMBERS, TOWERS, DEEP, SOUP, LONG, REPEATED)
NEVER_EQUAL = st.one_of(BIG_NUMBERS, TOWERS)  # values beyond 1e100, refused, or far from every GT_POOL entry
GT_POOL = [
    "0",
    "1",
    "42",
    "-7",
    "\\frac{3}{4}",
    "0.5",
    "2\\sqrt{3}",
    "\\pi",
    "(1,2)",
    "[0,1)",
    "x^2+1",
    "\\infty",
    "B",
    "\\text{Devon}",
    "10000",
    "120",
    "\\{1,2\\}",
]


def _bounded_call(response, gt, rule):
    t = time.monotonic()
    r = grade(response, gt, rule)
    elapsed = time.monotonic() - t
    assert elapsed < CALL_LIMIT_S and r.status != "timeout", (response[:200], gt, rule, r, elapsed)
    assert {r.format_reward, r.answer_reward, r.reward} <= {0.0, 1.0} and r.reward == r.answer_reward
    return r


@fuzz(1000)
@given(answer=HOSTILE, gt=st.sampled_from(GT_POOL), rule=st.sampled_from(RULES))
def test_hostile_answers_are_bounded(answer, gt, rule):
    _bounded_call(wrap(answer, rule), gt, rule)


@fuzz(500)
@given(answer=NEVER_EQUAL, gt=st.sampled_from(GT_POOL), rule=st.sampled_from(RULES))
def test_huge_values_and_towers_never_score(answer, gt, rule):
    assert _bounded_call(wrap(answer, rule), gt, rule).reward == 0, (answer, gt, rule)


@fuzz(250)
@given(answer=HOSTILE, gt=HOSTILE)
def test_hostile_ground_truths_never_raise(answer, gt):
    for fn in REWARD_FNS:
        out = fn(wrap(answer, "r1_zero") if fn is not question_only_reward_fn else wrap(answer, "question_only"), gt)
        assert set(out) == {"format_reward", "answer_reward", "reward"} and set(out.values()) <= {0.0, 1.0}


@fuzz(200)
@given(
    response=st.one_of(
        st.text(max_size=300),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
        st.builds("{}</think> <answer>{}".format, st.text(max_size=50), st.text(max_size=50)),
    ),
    gt=st.one_of(
        st.text(max_size=30), st.integers(), st.floats(allow_nan=True), st.lists(st.text(max_size=9), max_size=3)
    ),
)
def test_arbitrary_text_never_raises(response, gt):
    for fn in REWARD_FNS:
        assert set(fn(response, gt).values()) <= {0.0, 1.0}


# ---------------------------------------------------------------- values known to differ
def _int_forms(n: int) -> list[str]:
    """Renderings of the integer n that a MATH grader must read as n."""
    forms = [str(n), f"\\frac{{{2 * n}}}{{2}}", f"{n}.0", f"{{{n}}}", f"({n})", f"x = {n}", f"{n}\\text{{ cm}}"]
    if abs(n) >= 1000:
        forms.append(f"{n:,}")
    if n >= 0:
        forms += [f"\\sqrt{{{n * n}}}", f"\\${n}"]
    return forms


INT_FORM = st.builds(lambda n, k: (n, _int_forms(n)[k % len(_int_forms(n))]), SMALL, st.integers(0, 20))
FRACTION = st.tuples(st.integers(-999, 999), st.integers(1, 999))


def _frac(p: int, q: int) -> str:
    return f"\\frac{{{p}}}{{{q}}}" if p >= 0 else f"-\\frac{{{-p}}}{{{q}}}"


def _different_pair(kind, a, b, k):
    """(prediction, ground truth) of values that differ, by construction."""
    (na, fa), (nb, fb) = a, b
    if na == nb:
        nb, fb = nb + 1, str(nb + 1)
    x, y = abs(na) % 50 + 3, abs(nb) % 9 + 3  # x * y > x + y
    pairs = {
        "ints": (fa, fb),
        "fractions": (_frac(na, abs(nb) + 1), _frac(na + 1, abs(nb) + 1)),
        "tower": (TOWER_STYLES[k % len(TOWER_STYLES)].format(a=2, b=9, c=40 + k), fb),
        "infinity": (("\\infty", "-\\infty", "+\\infty", "\\pm\\infty", "\\infty+1")[k % 5], fb),
        "to_infinity": (fa, ("\\infty", "-\\infty")[k % 2]),
        "tiny": (f"{nb} + 10^{{-{20 + k % 80}}}", str(nb)),
        "surd": (f"10^{{{10 + k % 80}}}\\sqrt{{2}} + 1", f"10^{{{10 + k % 80}}}\\sqrt{{2}}"),
        "decimal": ("1.4142135623731", "\\sqrt{2}"),
        "two_numbers": (f"{abs(na) % 100} {abs(nb) % 100 + 1}", str((abs(na) % 100) * (abs(nb) % 100 + 1))),
        "candidates": (f"{nb}, {na}", str(na)),
        "either": (f"{nb} or {na}", str(na)),
        "boxes": (f"\\boxed{{{na}}} \\boxed{{{nb}}}", str(na)),
        "superscript": (f"{abs(na) % 100}²", str(abs(na) % 100) + "2"),
        "ellipsis": (f"\\ldots {na}", str(na)),
        "subscript": (f"{na}_{{0}}", str(na)),
        "equation": (f"\\pi = {na}", str(na)),
        "mixed": (f"{abs(nb) % 9 + 2}\\frac{{1}}{{2}}", str(abs(nb) % 9 + 2) + "/2"),
        # red-team review: juxtapositions read as sums, dropped letters and operators, other variables
        "juxtaposed": (f"\\sin 0 + ({x})({y})", str(x + y)),
        "braces": (f"{x}{{{y}}}", str(x * y)),
        "brace_sum": (f"{{{x}}}{{{y}}}", str(x + y)),
        "unit_letter": (f"\\sin 0 + {x} {'msg'[k % 3]}", str(x)),
        "operator_word": (f"{x}\\text{{ times }}{y}", f"{x}{y}"),
        "percent": (f"{x}\\%{y}", f"{x}{y}"),
        "variable": (f"y = {x}", f"x = {x}"),
        "root_digits": (f"\\sqrt{k % 9 + 1}{y}", f"\\sqrt{{{k % 9 + 1}{y}}}"),
        "double_factorial": (f"{k % 4 + 3}!!", str(math.factorial(math.factorial(k % 4 + 3)))),
    }
    return pairs[kind]


@fuzz(2000)
@given(
    kind=st.sampled_from(
        [
            "ints",
            "fractions",
            "tower",
            "infinity",
            "to_infinity",
            "tiny",
            "surd",
            "decimal",
            "two_numbers",
            "candidates",
            "either",
            "boxes",
            "superscript",
            "ellipsis",
            "subscript",
            "equation",
            "mixed",
            "juxtaposed",
            "braces",
            "brace_sum",
            "unit_letter",
            "operator_word",
            "percent",
            "variable",
            "root_digits",
            "double_factorial",
        ]
    ),
    a=INT_FORM,
    b=INT_FORM,
    k=st.integers(0, 1000),
    rule=st.sampled_from(RULES),
)
def test_different_values_never_score(kind, a, b, k, rule):
    pred, gt = _different_pair(kind, a, b, k)
    r = _bounded_call(wrap(pred, rule), gt, rule)
    assert r.reward == 0, (kind, pred, gt, rule, r)


@fuzz(500)
@given(a=INT_FORM, k=st.integers(0, 20), rule=st.sampled_from(RULES))
def test_equal_values_do_score(a, k, rule):
    """The positive control: two renderings of one integer always match (the grader is not just strict)."""
    n, form = a
    gt = _int_forms(n)[k % len(_int_forms(n))]
    if gt.startswith("x =") or "\\text" in gt or "\\$" in gt:
        gt = str(n)
    assert _bounded_call(wrap(form, rule), gt, rule).reward == 1, (form, gt, rule)


LEAF = st.integers(0, 20).map(lambda n: (Fraction(n), str(n)))


def _combine(op: str, a: tuple, b: tuple, k: int) -> tuple:
    """(exact value, LaTeX) of one arithmetic node; every operand is parenthesized, so the text is unambiguous."""
    (va, ta), (vb, tb) = a, b
    if op == "+":
        return va + vb, f"({ta}) + ({tb})"
    if op == "-":
        return va - vb, f"({ta}) - ({tb})"
    if op == "*":
        return va * vb, f"({ta}) \\cdot ({tb})"
    if op == "/" and vb != 0:
        return va / vb, f"\\frac{{{ta}}}{{{tb}}}"
    if op == "^" and (va != 0 or k > 0):
        return va**k, f"({ta})^{{{k}}}"
    return -va, f"-({ta})"


ARITHMETIC = st.recursive(
    LEAF, lambda sub: st.builds(_combine, st.sampled_from("+-*/^n"), sub, sub, st.integers(0, 3)), max_leaves=8
).filter(lambda e: len(e[1]) <= 350 and abs(e[0]) < 10**30)


def _render(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return ("-" if v < 0 else "") + f"\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


@fuzz(400)
@given(
    expr=ARITHMETIC,
    delta=st.sampled_from([Fraction(1), Fraction(-1, 7), Fraction(1, 10**12)]),
    rule=st.sampled_from(RULES),
)
def test_arithmetic_is_exact(expr, delta, rule):
    """A random exact expression equals its value and nothing else (off by one, by 1/7 or by 1e-12)."""
    value, text = expr
    assert _bounded_call(wrap(text, rule), _render(value), rule).reward == 1, (text, value)
    assert _bounded_call(wrap(text, rule), _render(value + delta), rule).reward == 0, (text, value + delta)


# ---------------------------------------------------------------- no code runs
def _payloads(canary: pathlib.Path) -> list[str]:
    c = str(canary)
    return [
        f"__import__('os').system('touch {c}')",
        f"eval(\"open('{c}','w')\")",
        f"exec(\"open('{c}','w')\")",
        f"lambda: open('{c}', 'w')",
        f"(lambda: open('{c}','w'))()",
        f"open('{c}','w').close()",
        f"\\text{{__import__('os').system('touch {c}')}}",
        f"\\boxed{{eval(\"open('{c}','w')\")}}",
        f"Symbol('x').__class__.__init__.__globals__['os'].system('touch {c}')",
        f"$(__import__('os').system('touch {c}'))$",
        f"\\sin(__import__('os').system('touch {c}'))",
        f"sympify(\"__import__('os').system('touch {c}')\")",
        "{}.__class__.__base__.__subclasses__()",
        f"x ** (lambda: open('{c}','w'))()",
        f"\\frac{{open('{c}','w')}}{{1}}",
    ]


def test_no_code_runs(tmp_path):
    canary = tmp_path / "canary"
    for payload in _payloads(canary):
        for rule in RULES:
            _bounded_call(wrap(payload, rule), "1", rule)
            _bounded_call(wrap("1", rule), payload, rule)
            _bounded_call(wrap(payload, rule), payload, rule)
    assert not canary.exists()


@fuzz(200)
@given(prefix=SOUP, suffix=SOUP, idx=st.integers(0, 14), rule=st.sampled_from(RULES))
def test_no_code_runs_in_noise(tmp_path_factory, prefix, suffix, idx, rule):
    canary = tmp_path_factory.getbasetemp() / "noise-canary"
    _bounded_call(wrap(prefix + _payloads(canary)[idx] + suffix, rule), "1", rule)
    assert not canary.exists()


# ---------------------------------------------------------------- universal answers
UNIVERSAL = [
    "\\infty",
    "-\\infty",
    "+\\infty",
    "\\pm\\infty",
    "\\infty - \\infty",
    "10^{400}\\pi",
    "\\exp(1000)",
    "\\binom{10^{60}}{10^{30}}",
    "nan",
    "NaN",
    "\\text{any}",
    "\\text{anything}",
    "0/0",
    "\\frac{0}{0}",
    "x",
    "\\emptyset",
    "\\varnothing",
    "\\mathbb{R}",
    "\\mathbb{C}",
    "all real numbers",
    "\\text{all real numbers}",
    "empty",
    "\\text{none}",
    "undefined",
    "",
    " ",
    "\\ldots",
    "?",
    "10^{10^{10}}",
    "9^{9^{9}}",
    "1e999",
    "1001!",
    "\\Gamma(10^6)",
    "\\sum_{n=1}^{\\infty} n",
    ", ".join(str(i) for i in range(-60, 61)),
    " or ".join(str(i) for i in range(-30, 31)),
    ", ".join(f"\\pm {i}" for i in range(40)),
    "\\boxed{1, 2, 3, \\ldots}",
    "1, 2, 3, \\ldots",
    "(-\\infty, \\infty)",
    "\\lfloor 9^(9^9) \\rfloor",
]
_INFINITE = {"\\infty", "-\\infty", "+\\infty", "\\pm\\infty", "\\infty - \\infty", "(-\\infty, \\infty)"}


def _ground_truths() -> list[str]:
    """A few hundred varied ground truths: integers, fractions, decimals, radicals, intervals, tuples, text..."""
    gts = [str(i) for i in range(-100, 101)] + [str(10**k + 7) for k in range(2, 99, 3)]
    gts += [_frac(p, q) for p in range(-7, 8, 2) for q in (3, 7, 11)]
    gts += [f"{i}.{j}5" for i in range(0, 30, 3) for j in range(3)] + [f"\\sqrt{{{k}}}" for k in (2, 3, 5, 7, 10, 12)]
    gts += [f"{a}\\sqrt{{{b}}}" for a in (2, 3, 5) for b in (2, 3, 7)]
    gts += [f"\\frac{{\\sqrt{{{b}}}}}{{2}}" for b in (2, 3, 5)]
    gts += [f"({a},{b})" for a in range(-3, 4) for b in (1, 5)] + [f"[{a},{a + 2})" for a in range(-3, 3)]
    gts += [f"(-\\infty,{a}]" for a in range(-2, 3)] + [f"\\{{{a},{a + 1}\\}}" for a in range(3)]
    gts += [
        "\\pi",
        "2\\pi",
        "\\frac{\\pi}{3}",
        "e",
        "x^2+1",
        "2x-3",
        "\\frac{x}{2}",
        "\\text{Devon}",
        "\\text{(C)}",
        "B",
        "\\text{odd}",
        "\\text{Sunday}",
        "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
        "1,000,000",
        "5\\%",
        "90^\\circ",
        "\\$2.50",
        "0.000001",
        "\\infty",
        "-\\infty",
        "3, 4",
        "\\dfrac{1}{2}",
    ]
    gts += [f"{a}x+{b}" for a in (2, 3) for b in (1, 5)] + [f"x^{k}" for k in range(2, 6)] + ["\\sin x", "\\log 2"]
    gts += [f"{d}.{d}{d}" for d in range(1, 10)] + [f"-{d}\\sqrt{{{d + 1}}}" for d in range(1, 9)]
    gts += [f"({a}, {a + 1}, {a + 2})" for a in range(5)] + [f"{a}, {a + 3}" for a in range(5)]
    return gts


def test_universal_answers_score_zero():
    gts = _ground_truths()
    assert len(gts) >= 300
    responses, packed, labels = [], [], []
    for cand in UNIVERSAL:
        for i, gt in enumerate(gts):
            if cand in _INFINITE and "\\infty" in gt and "," not in gt:
                continue  # an infinity literal is genuinely equal to the same infinity ground truth
            rules = RULES if i % 5 == 0 else ("r1_zero",)  # all three rules on a fifth of the ground truths
            for rule in rules:
                responses.append(wrap(cand, rule))
                packed.append((gt, rule))
                labels.append((cand, gt, rule))
    with GraderPool(pool_mod.SINGLE_CALL_PATH, workers=2, timeout_s=single.SINGLE_CALL_TIMEOUT_S) as pool:
        out = pool.map(responses, packed)
    wins = [(lab, o["status"]) for lab, o in zip(labels, out, strict=True) if o["reward"] != 0]
    timeouts = [lab for lab, o in zip(labels, out, strict=True) if o["status"] == "timeout"]
    assert not wins and not timeouts, (wins[:10], timeouts[:10])


# ---------------------------------------------------------------- linear time, no nested quantifiers
def _best_time(fn, arg, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            fn(arg)
        except ValueError:
            pass  # Rejected / Unparsable are answers, not failures
        best = min(best, time.perf_counter() - t)
    return best


PATTERNS = [
    "1a",
    "a",
    "a ",
    "1 ",
    "\\text{",
    "\\text{cm}",
    "{,}",
    "1,",
    "^",
    "^{",
    "9^",
    "\\!",
    "~",
    "\\;",
    "(",
    "{(",
    "</answer>",
    "\\boxed{",
    "\\boxed{1}",
    "</think> <answer>",
    "<answer>",
    "x=",
    "cm ",
    "e1",
    "\\frac1",
    "\\sqrt",
    ".0",
    "\\left(",
    "²",
    "₀",
    "x_",
    "\\\\",
    "1\\,",
]
ENTRY_POINTS = {  # name -> (function, length of the long input; the short one is a tenth of it)
    "normalize": (normalize, 1500),
    "screen": (screen, 390),
    "tokenize": (tokenize, 4000),
    "extract_r1_zero": (lambda s: extract_r1_zero("</think> <answer>" + s), 40_000),
    "extract_r1_zero_strict": (lambda s: extract_r1_zero_strict("</think> <answer>" + s + "</answer>"), 40_000),
    "extract_question_only": (extract_question_only, 40_000),
    "boxed_contents": (boxed_contents, 40_000),
}


def _measure(conn) -> None:
    """(name, pattern) -> (short time, long time) for every entry point; runs in a killable child process,
    because a backtracking regex cannot be interrupted and would hang the test run instead of failing it."""
    out = {}
    for name, (fn, long_chars) in ENTRY_POINTS.items():
        for pattern in PATTERNS:
            reps = max(10, long_chars // len(pattern))
            short, long = "1" + pattern * (reps // 10) + "1", "1" + pattern * reps + "1"
            out[name, pattern] = (_best_time(fn, short), _best_time(fn, long))
    conn.send(out)


@pytest.fixture(scope="module")
def entry_point_times():
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_measure, args=(child,), daemon=True)
    proc.start()
    done = parent.poll(60)
    proc.kill()
    assert done, "a text entry point did not finish within 60 s (catastrophic backtracking?)"
    return parent.recv()


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_text_entry_points_run_in_linear_time(name, entry_point_times):
    for pattern in PATTERNS:
        t_short, t_long = entry_point_times[name, pattern]
        assert t_long < 0.05, (name, pattern, t_long)  # absolute bound at the longest input each entry point takes
        assert t_long < 25 * t_short + 2e-4, (name, pattern, t_short, t_long)  # 10x input -> ~10x time


def _regex_literals() -> list[tuple[str, str]]:
    """Every pattern passed to `re.*` in the grader package, as (file, pattern); dynamic patterns fail the test."""
    functions = {"compile", "sub", "search", "match", "fullmatch", "findall", "finditer", "split"}
    found = []
    for path in sorted(GRADER_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None)
            if not (
                isinstance(node, ast.Call)
                and isinstance(func, ast.Attribute)
                and func.attr in functions
                and isinstance(func.value, ast.Name)
                and func.value.id == "re"
            ):
                continue
            arg = node.args[0]
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), f"{path.name}: dynamic regex"
            found.append((path.name, arg.value))
    return found


def _children(op, av) -> list:
    """Sub-patterns of one parsed regex node (groups, alternatives, lookarounds)."""
    if op is sre_c.SUBPATTERN:
        return [av[-1]]
    if op is sre_c.BRANCH:
        return list(av[1])
    if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
        return [av[1]]
    return []


def _nested_repeat(items, inside: bool = False) -> bool:
    """True when a quantifier occurs inside another quantifier's operand (the backtracking blow-up shape)."""
    for op, av in items:
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
            if inside or _nested_repeat(av[2], True):
                return True
        elif any(_nested_repeat(child, inside) for child in _children(op, av)):
            return True
    return False


def test_no_regex_with_nested_quantifiers():
    patterns = _regex_literals()
    assert len(patterns) >= 10
    bad = [(f, p) for f, p in patterns if _nested_repeat(sre_parse.parse(p))]
    assert not bad, bad
    assert _nested_repeat(sre_parse.parse(r"(?:[A-Za-z]+\s*)+")) and not _nested_repeat(sre_parse.parse(r"\d+\s*x"))


@pytest.fixture(scope="module")
def audit_pool():
    from a5core.grader.audit import AUDIT_PATH

    with GraderPool(AUDIT_PATH, workers=1, timeout_s=single.SINGLE_CALL_TIMEOUT_S) as pool:
        yield pool


@fuzz(120)
@given(answer=HOSTILE, gt=st.sampled_from(GT_POOL), rule=st.sampled_from(RULES))
def test_the_audit_is_bounded_and_never_raises(audit_pool, answer, gt, rule):
    """math-verify's parser, which the audit runs without its own timers, is bounded by the audit's pool: a hostile
    answer comes back in time, as verdicts or as unaudited, never as an error."""
    from a5core.grader.audit import verdicts

    t = time.monotonic()
    [reply] = audit_pool.map([wrap(answer, rule)], [(gt, rule)])
    assert time.monotonic() - t < CALL_LIMIT_S + 5.0  # the bound, plus a worker restart after a kill
    v = verdicts(reply)
    assert reply.get("status") != "error", (answer, gt, rule, reply)
    assert v["strict_reward"] in (0.0, 1.0, None) and v["verified"] in (0.0, 1.0, None), (answer, reply)
