"""The verified reward: a table of equivalence, format, reward-hack and hostile cases."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from a5core.grader import (
    GroundTruthError,
    check_ground_truth,
    grade,
    grade_batch,
    question_only_reward_fn,
    r1_zero_reward_fn,
    r1_zero_strict_reward_fn,
    single,
)
from a5core.grader import pool as pool_mod
from a5core.grader.pool import BUILTIN, GraderPool, load_reward_fn
from tests import slow_grader

BOUND_S = 2.0
ZERO = {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


def R(ans: str) -> str:
    return f"Let me think. </think> <answer>{ans}</answer>"


# (answer inside <answer>, ground truth, expected answer reward)
EQUIV = [
    ("\\frac{1}{2}", "0.5", 1),
    ("0.5", "\\frac12", 1),
    ("\\dfrac{3}{4}", "0.75", 1),
    ("\\tfrac{3}{4}", "\\frac{3}{4}", 1),
    ("3/4", "\\frac{3}{4}", 1),
    ("0.333", "\\frac{1}{3}", 0),
    ("10\\%", "10", 1),
    ("10%", "10", 1),
    ("1,000", "1000", 1),
    ("1{,}000", "1000", 1),
    ("12,345,678", "12345678", 1),
    ("1.5e3", "1500", 1),
    ("1.5\\times 10^{3}", "1500", 1),
    ("5\\text{ cm}", "5", 1),
    ("5 \\text{ inches}", "5", 1),
    ("5 cm", "5", 1),
    ("\\$5", "5", 1),
    ("\\$5.00", "5", 1),
    ("90^\\circ", "90", 1),
    ("90^{\\circ}", "90", 1),
    ("x = 3", "3", 1),
    ("x=-2", "-2", 1),
    ("\\sqrt{8}", "2\\sqrt{2}", 1),
    ("\\sqrt2/2", "\\frac{\\sqrt{2}}{2}", 1),
    ("\\pi/2", "\\frac{\\pi}{2}", 1),
    ("2\\pi", "\\pi \\cdot 2", 1),
    ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}", 0),
    ("1.0000001", "1", 0),
    ("3.14", "\\pi", 0),
    ("c+d", "a+d", 0),
    ("e - 5", "5", 0),
    ("2x+1", "1+2x", 1),
    ("x^2-1", "(x-1)(x+1)", 1),
    ("(1,2)", "(1,2)", 1),
    ("(2,1)", "(1,2)", 0),
    ("(1,2]", "(1,2]", 1),
    ("[1,2)", "(1,2]", 0),
    ("(1,2)", "[1,2]", 0),
    ("\\{1,2\\}", "\\{2,1\\}", 1),
    ("\\{1,3\\}", "\\{2,1\\}", 0),
    ("-2, 1", "1, -2", 1),
    ("1, 2", "1, 2, 3", 0),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{bmatrix}1 & 2 \\\\ 3 & 4\\end{bmatrix}", 1),
    ("\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 0),
    ("B", "B", 1),
    ("(B)", "B", 1),
    ("\\text{(C)}", "C", 1),
    ("D", "C", 0),
    ("\\frac{6}{8}", "\\frac{3}{4}", 1),
    ("-\\frac{80}{9}", "-10", 0),
    ("-10", "-10", 1),
    ("2 or 3", "2", 0),
    ("1, 2, 3", "2", 0),
    ("\\pm 2", "2", 0),
    ("x > 5", "5", 0),
    ("2 and 3", "2", 0),
    ("\\pm 2", "\\pm 2", 1),
    ("(-\\infty, 3)", "(-\\infty,3)", 1),
    ("[0, 1] \\cup [2, 3]", "[0,1]\\cup[2,3]", 1),
    ("\\sin(x)", "\\sin x", 1),
    ("0.1", "\\frac{1}{10}", 1),
    ("100", "100.0", 1),
    ("007", "7", 1),
    ("-0", "0", 1),
    ("2^{10}", "1024", 1),
    ("\\left(1, 2\\right)", "(1,2)", 1),
    ("\\boxed{7}", "7", 1),
    ("\\boxed{7} and \\boxed{8}", "7", 0),
    ("\\boxed{7} \\boxed{7}", "7", 1),
]

# (full response, ground truth, format reward, answer reward) under the handout's r1_zero rule: format ok iff
# "</think> <answer>" and "</answer>" occur; the answer is what follows the last <answer>, minus </answer>.
FORMAT = [
    (R("5"), "5", 1, 1),
    (R("6"), "5", 1, 0),
    ("no tags at all 5", "5", 0, 0),
    ("</think> <answer>5", "5", 0, 0),
    ("</think> <answer>5</answer> trailing text", "5", 1, 0),
    ("</think> <answer>5</answer> <answer>5</answer>", "5", 1, 1),
    ("</think> <answer><answer>5</answer></answer>", "5", 1, 1),
    ("<answer>5</answer>", "5", 0, 0),
    ("x </think>\n\n<answer> 5 </answer>\n", "5", 0, 0),
    ("</think></think> <answer>5</answer>", "5", 1, 1),
    ("</think> <answer></answer>", "5", 1, 0),
    ("</think> <answer>5</answer></think>", "5", 1, 0),
    (R("\\boxed{5}"), "5", 1, 1),
    (R("\\boxed{4} so \\boxed{5}"), "5", 1, 1),
    (R("\\boxed{5} \\boxed"), "5", 1, 0),
    (R("\\boxed{5"), "5", 1, 0),
    (R("\\boxed 5"), "5", 1, 0),
    ("</think> <answer>4</answer> <answer>5</answer>", "5", 1, 1),
]

# The same responses under the strict anti-hack rule (r1_zero_strict_reward_fn): the old FORMAT table.
STRICT_FORMAT = [
    (R("5"), "5", 1, 1),
    (R("6"), "5", 1, 0),
    ("no tags at all 5", "5", 0, 0),
    ("</think> <answer>5", "5", 0, 0),
    ("</think> <answer>5</answer> trailing text", "5", 0, 0),
    ("</think> <answer>5</answer> <answer>5</answer>", "5", 0, 0),
    ("</think> <answer><answer>5</answer></answer>", "5", 0, 0),
    ("<answer>5</answer>", "5", 0, 0),
    ("x </think>\n\n<answer> 5 </answer>\n", "5", 1, 1),
    ("</think></think> <answer>5</answer>", "5", 0, 0),
    ("</think> <answer></answer>", "5", 1, 0),
    ("</think> <answer>5</answer></think>", "5", 0, 0),
    ("<think>a</think> <answer>5</answer>", "5", 1, 1),
    ("a <think> b</think> <answer>5</answer>", "5", 0, 0),
    (R("\\boxed{4} so \\boxed{5}"), "5", 1, 0),
]

HOSTILE = [
    "9**9**9**9",
    "(10**9)!",
    "2**2**2**2**2**2",
    "9^{9^{9^9}}",
    "\\text{" * 32000,
    "1" * 100_000,
    "(" * 500 + "1" + ")" * 500,
    "(1).__class__",
    "__import__('os').system('echo pwned')",
    "2^{100000000}",
    "10^{10^{10}}",
    "x^{99999999}",
    "\\frac{1}{0}",
    "Ы + 1",
    "lambda: 1",
    "1e999999",
]

# Real MATH notation that screening refused before normalization ran (A4), and one-answer-one-value cases that
# used to match (B4): (answer inside <answer>, ground truth, expected answer reward).
NOTATION = [
    ("10,\\!000", "10000", 1),
    ("\\$1,\\!000", "1000", 1),
    ("5!", "120", 1),
    ("3!", "6", 1),
    ("0!", "1", 1),
    ("10~\\text{cm}", "10", 1),
    ("1\\;000", "1000", 1),
    ("\\frac{1}{2}\\quad", "0.5", 1),
    ("2^{10}\\,", "1024", 1),
    ("1001!", "1", 0),
    ("(10^{6})!", "1", 0),
    ("3²", "9", 1),
    ("x²", "x^2", 1),
    ("１２", "12", 1),
    ("−5", "-5", 1),
    ("3²", "32", 0),
    ("5 0", "0", 0),
    ("\\ldots 3", "3", 0),
    ("3_0", "3", 0),
    ("3₀", "3", 0),
    ("\\pi = 2\\sqrt{3}", "\\pi", 0),
    ("x = 2\\sqrt{3}", "\\pi", 0),
    ("\\pi = 2\\sqrt{3}", "2\\sqrt{3}", 0),
    ("2\\frac{1}{2}", "1", 0),
    ("x2", "2x", 0),
    ("voDen", "\\text{Devon}", 0),
    ("\\text{Devon}", "Devon", 1),
    ("1, 2, 3, \\ldots", "6", 0),
    ("3½", "3.5", 1),
    ("3½", "\\frac{3}{2}", 0),
    ("1.41421356237", "\\sqrt{2}", 0),
    ("10^{60}\\sqrt{2} + 1", "10^{60}\\sqrt{2}", 0),
    ("\\frac{1}{\\infty}", "0", 0),
    ("\\sqrt{2}+\\sqrt{3}", "\\sqrt{5+2\\sqrt{6}}", 1),
    ("\\sin^2 x + \\cos^2 x", "1", 1),
    ("20\\text{ cm}^2", "20", 1),
    ("36\\pi\\text{ cm}^3", "36\\pi", 1),  # a unit after \\pi (review 2026-11-30)
    ("16\\pi\\text{ square units}", "16\\pi", 1),
    ("16\\pi", "16\\pi\\text{ square units}", 1),
    ("2\\pi\\text{ cm}^3", "36\\pi", 0),
    ("x\\text{ cm}", "x", 0),  # after a variable the block stays: not unit stripping
    ("\\log_2 8 - 3", "0", 1),  # exact zero with no significant digits: proved, not "not comparable"
    ("\\ln 6-\\ln 2-\\ln 3", "0", 1),
    ("\\log_2 8 - 2", "0", 0),
    ("\\log_2 8", "3", 1),
    ("\\lfloor \\pi \\rfloor", "3", 1),
    ("\\sqrt[3]{27}", "3", 1),
]

# Universal answers that scored 1.0 against anything (B1) and their ground truths.
UNIVERSAL = [
    ("\\infty", "42"),
    ("-\\infty", "42"),
    ("10^{400}\\pi", "42"),
    ("\\exp(1000)", "42"),
    ("\\binom{10^{60}}{10^{30}}", "42"),
    ("3", "\\infty"),
    ("-\\infty", "\\infty"),
    ("\\infty", "-\\infty"),
    ("\\infty + 1", "\\infty"),
    ("\\pm\\infty", "\\infty"),
    ("0/0", "0"),
    ("\\frac{0}{0}", "1"),
    ("10^{100}\\cdot 10^{100}", "10^{200}"),
    ("\\exp(1000)", "\\exp(1000) + 1"),
]

# Red-team review, false positives: (answer, ground truth) pairs of different values (or of text that renders
# differently from what a parser reads) that scored 1.0 and must score 0.
REDTEAM_DIFFERENT = [
    ("\\sin(0)+(2)(3)", "5"),
    ("\\cos(0)\\cdot 2(3)", "5"),
    ("\\sin 0 + {5}{6}", "11"),
    ("{5}{6}", "11"),
    ("5{6}", "11"),
    ("5{6}", "30"),
    ("[5][6]", "11"),
    ("\\sin 0 + [5][6]", "11"),
    ("\\sin 0 + 5 m", "5"),
    ("\\sin 0 + 5 s", "5"),
    ("\\sin 0 + 3\\sqrt{4}", "5"),
    ("\\sin 0 + 2^{2}\\frac{1}{2}", "4.5"),
    ("\\sin0+2\\frac{1}{2}", "1"),
    ("\\sin 0 + \\frac{1}{2}3", "\\frac{3}{2}"),
    ("\\sin 0 + x^{2}3", "3x^2"),
    ("\\sin 0 + X", "x"),
    ("x(3)\\sin 1", "3x\\sin 1"),
    ("\\operatorname{sec}(0)", "0"),
    ("\\mathrm{min}(3,5)", "(3,5)"),
    ("5\\text{ times }6", "56"),
    ("1%2", "12"),
    ("5$6", "56"),
    ("5\\%6", "56"),
    ("y=3", "x=3"),
    ("x=-\\frac12x+3", "y=-\\frac12x+3"),
    ("-\\frac12x+3", "y=-\\frac12x+3"),
    ("x = x+1", "x+1"),
    ("on", "\\text{no}"),
    ("yx", "xy"),
    ("\\text{(E)}", "e"),
    ("(A)", "a"),
    ("E", "e"),
    ("c", "C"),
    ("3!!", "720"),
    ("3!!", "3"),
    ("\\sqrt23", "\\sqrt{23}"),
    ("2{5}", "10"),
    ("2{5}", "25"),
    ("0,500", "500"),
    ("\\begin{vmatrix}1&2\\\\3&4\\end{vmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("2\\frac{1}{2}", "1"),
    ("2\\frac{1}{2}", "2"),
    ("2\\frac{3}{2}", "\\frac72"),
    ("-2\\frac{1}{2}", "-\\frac32"),
    ("2\\frac{1}{2}x", "\\frac52 x"),
    ("5 \\$6", "56"),
    ("3...", "3"),
]

# Red-team review, correct answers that scored 0, and juxtapositions whose product is what they render.
REDTEAM_EQUAL = [
    ("\\sin(0)+(2)(3)", "6"),
    ("\\cos(0)\\cdot 2(3)", "6"),
    ("2\\frac{1}{2}", "\\frac52"),
    ("\\frac52", "2\\frac{1}{2}"),
    ("2.5", "2\\frac{1}{2}"),
    ("-2\\frac{1}{2}", "-2.5"),
    ("\\boxed {5}", "5"),
    ("\\varnothing", "\\emptyset"),
    ("\\{\\}", "\\emptyset"),
    ("|-3|", "3"),
    ("evelyn", "\\text{Evelyn}"),
    ("\\text{No}", "\\text{no}"),
    ("x=3", "3"),
    ("3", "x=3"),
    ("x = 3", "x=\\frac{6}{2}"),
    ("y = -\\frac{1}{2}x+3", "y=-\\frac12x+3"),
    ("y = 2x+1", "2x+1"),
    ("x=2, x=-2", "2,-2"),
    ("(c)", "C"),
    ("\\sin 0 + x", "x"),
    ("x \\leq 3", "x \\le 3"),
    ("-\\$5", "-5"),
    ("25\\%", "25"),
    ("\\begin{vmatrix}1&2\\\\3&4\\end{vmatrix}", "\\begin{vmatrix}1 & 2\\\\3&4\\end{vmatrix}"),
    ("\\log_{2}8", "3"),
    ("\\log_2{8}", "3"),
    ("\\sqrt[3]{8}\\cdot\\sin(\\frac{\\pi}{2})", "2"),
    ("(3!)!", "720"),
    ("\\frac{1}{2}(3)\\sin(x)", "1.5\\sin x"),
    ("(10\\%, 20\\%)", "(10,20)"),
    ("5\\%.", "5"),
]

# Red-team review, hangs (17 s to over 120 s inline): graded through the killable single-call worker, each must
# come back well inside the time limit, not as a timeout.
REDTEAM_SLOW = [
    ("\\sin(\\exp(\\exp(20)))", "5"),
    ("\\lfloor \\exp(10^{7}) \\rfloor", "5"),
    ("\\sin(0)+\\sqrt[0.0000001]{99}", "5"),
    ("5+(a+b+c+d+e+f+g)^{40}-\\frac{(2a+2b+2c+2d+2e+2f+2g)^{40}}{2^{40}}", "5"),
    ("7+(a+b+c+d+e)^{20}-\\frac{(2a+2b+2c+2d+2e)^{20}}{2^{20}}", "7"),
    ("\\sin((\\exp(230))^{400})", "5"),
    ("\\sin(\\cosh(10^{90}))", "5"),
    ("\\tan(x)^{400}", "5"),
    ("\\sin(\\frac{10^{90}}{1}^{400})", "5"),
    ("\\sin(\\exp(10^{90}x))", "5"),
    (
        "5+(\\sqrt{2}+\\sqrt{3}+\\sqrt{5}+\\sqrt{7})^{60}"
        "-\\frac{(2\\sqrt{2}+2\\sqrt{3}+2\\sqrt{5}+2\\sqrt{7})^{60}}{2^{60}}",
        "5",
    ),
    ("\\sin(" * 23 + "x" + ")" * 23, "5"),
]


@pytest.mark.parametrize("ans,gt", REDTEAM_DIFFERENT)
def test_redteam_false_positives_score_zero(ans, gt):
    assert r1_zero_reward_fn(R(ans), gt)["answer_reward"] == 0


@pytest.mark.parametrize("ans,gt", REDTEAM_EQUAL)
def test_redteam_correct_answers_score(ans, gt):
    assert r1_zero_reward_fn(R(ans), gt)["answer_reward"] == 1


@pytest.mark.parametrize("ans,gt", REDTEAM_SLOW)
def test_redteam_hangs_are_bounded(ans, gt):
    t = time.monotonic()
    r = grade(R(ans), gt)
    assert time.monotonic() - t < BOUND_S and r.status != "timeout" and r.reward == 0, (r, time.monotonic() - t)


@pytest.mark.parametrize("ans,gt,expected", EQUIV)
def test_equivalence(ans, gt, expected):
    assert r1_zero_reward_fn(R(ans), gt)["answer_reward"] == expected


@pytest.mark.parametrize("resp,gt,fmt,ansr", FORMAT)
def test_format(resp, gt, fmt, ansr):
    r = r1_zero_reward_fn(resp, gt)
    assert (r["format_reward"], r["answer_reward"], r["reward"]) == (fmt, ansr, ansr)


def test_table_size():
    assert len(EQUIV) + len(FORMAT) + len(HOSTILE) >= 80


@pytest.mark.parametrize("ans", HOSTILE)
def test_hostile_main_thread_bounded(ans):
    t = time.monotonic()
    r = grade(R(ans), "1")
    assert time.monotonic() - t < BOUND_S
    assert r.answer_reward == 0 and r.status in ("rejected_input", "unparsable", "wrong")


def test_hostile_worker_thread_bounded():
    results = {}

    def run():
        for a in HOSTILE:
            t = time.monotonic()
            results[a] = (grade(R(a), "1").reward, time.monotonic() - t)

    th = threading.Thread(target=run)
    th.start()
    th.join(timeout=BOUND_S * len(HOSTILE))
    assert not th.is_alive() and len(results) == len(HOSTILE)
    assert all(r == 0 and dt < BOUND_S for r, dt in results.values())


def test_batch_api_bounded_and_correct():
    responses = [R(a) for a in HOSTILE] + [R("\\frac{1}{2}"), R("3")]
    t = time.monotonic()
    out = grade_batch(responses, ["1"] * len(HOSTILE) + ["0.5", "4"], workers=2, timeout_s=3.0)
    assert time.monotonic() - t < 60
    assert [o["reward"] for o in out[-2:]] == [1.0, 0.0]
    assert all(o["reward"] == 0 for o in out[: len(HOSTILE)])


def test_batch_timeout_replaces_worker():
    with GraderPool("tests.slow_grader:slow_reward", workers=1, timeout_s=1.0) as pool:
        out = pool.map(["sleep", "fast", "sleep", "fast"], ["1"] * 4)
    assert [o["status"] for o in out] == ["timeout", "custom", "timeout", "custom"]
    assert [o["reward"] for o in out] == [0.0, 1.0, 0.0, 1.0]


@pytest.fixture(scope="module", autouse=True)
def warm_single_call_worker():
    """Start the process-wide grading worker once, so per-call bounds below measure grading, not start-up."""
    assert grade(R("1"), "1").status == "correct"


@pytest.mark.parametrize("resp,gt,fmt,ansr", STRICT_FORMAT)
def test_strict_format(resp, gt, fmt, ansr):
    r = r1_zero_strict_reward_fn(resp, gt)
    assert (r["format_reward"], r["answer_reward"], r["reward"]) == (fmt, ansr, ansr)


@pytest.mark.parametrize("ans,gt,expected", NOTATION)
def test_notation_and_one_value(ans, gt, expected):
    assert r1_zero_reward_fn(R(ans), gt)["answer_reward"] == expected


@pytest.mark.parametrize("ans,gt", UNIVERSAL)
def test_universal_answers_score_zero(ans, gt):
    for fn in (r1_zero_reward_fn, r1_zero_strict_reward_fn):
        assert fn(R(ans), gt)["reward"] == 0
    assert question_only_reward_fn(f"so \\boxed{{{ans}}}", gt)["reward"] == 0


def test_infinity_matches_only_the_same_infinity():
    assert r1_zero_reward_fn(R("\\infty"), "\\infty")["reward"] == 1
    assert r1_zero_reward_fn(R("+\\infty"), "\\infty")["reward"] == 1
    assert r1_zero_reward_fn(R("-\\infty"), "-\\infty")["reward"] == 1
    assert r1_zero_reward_fn(R("(-\\infty, 3]"), "(-\\infty,3]")["reward"] == 1
    assert r1_zero_reward_fn(R("(-\\infty, 3]"), "(-\\infty,4]")["reward"] == 0


def test_status_separates_parse_failures():
    assert grade("no format", "1").status == "format_error"
    assert grade(R("\\boxed{1} \\boxed{2}"), "1", "r1_zero_strict").status == "multiple_answers"
    assert grade(R("\\boxed{1} \\boxed{2}"), "1").status == "wrong"  # handout: the last box is the answer
    assert grade(R("9**9"), "1").status == "rejected_input"
    assert grade(R("3"), "4").status == "wrong"
    assert grade(R("\\unknowncommand{3}"), "4").status == "unparsable"
    assert grade(R("\\boxed{3"), "3").status == "no_answer"
    d = grade(R("\\dfrac{1}{2}"), "0.5")
    assert d.status == "correct" and d.extracted == "\\dfrac{1}{2}" and d.normalized_pred == "\\frac{1}{2}"
    with pytest.raises(ValueError, match="unknown prompt"):
        grade(R("1"), "1", "no_such_rule")


def test_ground_truth_forms():
    assert r1_zero_reward_fn(R("12"), 12)["reward"] == 1
    assert r1_zero_reward_fn(R("0.5"), 0.5)["reward"] == 1
    assert r1_zero_reward_fn(R("12"), ["twelve", "12"])["reward"] == 1
    assert r1_zero_reward_fn(R("13"), ["twelve", "12"])["reward"] == 0
    assert r1_zero_reward_fn(R("12"), "The answer is \\boxed{12}")["reward"] == 1


def test_check_ground_truth():
    assert check_ground_truth("\\dfrac{1}{2}") == "\\frac{1}{2}"
    assert check_ground_truth("10,\\!000") == "10000"
    assert check_ground_truth(7) == "7"
    assert check_ground_truth("so \\boxed{\\$5}") == "5"
    assert issubclass(GroundTruthError, ValueError)
    for bad, reason in [
        ("Ы", "non-ASCII"),
        ("9^{9^9}", "tower"),
        ("\\text{" * 1000, "longer"),
        ("", "empty"),
        ("\\boxed{1", "balanced"),
        ("1" * 101, "digits"),
        ('a"b', "alphabet"),
    ]:
        with pytest.raises(GroundTruthError, match=reason):
            check_ground_truth(bad)


def test_bad_ground_truth_grades_gracefully():
    r = grade(R("9^{9^9}"), "9^{9^9}")
    assert r.reward == 0 and r.status == "rejected_input"
    assert grade(R("1"), "Ы").status == "wrong"


def test_question_only():
    assert question_only_reward_fn("so the answer is \\boxed{\\frac{1}{2}}", "0.5")["reward"] == 1
    assert question_only_reward_fn("first \\boxed{3} then \\boxed{4}", "4")["reward"] == 1
    assert question_only_reward_fn("first \\boxed{4} then \\boxed{3}", "4") == {**ZERO, "format_reward": 1.0}
    assert question_only_reward_fn("the total is 42", "42") == ZERO  # no last-number fallback (handout)
    assert question_only_reward_fn("no numbers here", "42") == ZERO
    assert question_only_reward_fn("unbalanced \\boxed{42", "42") == ZERO


def test_pluggable_reward_fn_path():
    assert load_reward_fn("a5core.grader:r1_zero_reward_fn") is r1_zero_reward_fn
    assert load_reward_fn("a5core.grader:r1_zero_strict_reward_fn") is r1_zero_strict_reward_fn
    assert BUILTIN["a5core.grader:r1_zero_strict_reward_fn"] == "r1_zero_strict"
    with pytest.raises(ValueError, match="module:function"):
        load_reward_fn("a5core.grader.r1_zero_reward_fn")
    with pytest.raises(ValueError, match="not a callable"):
        load_reward_fn("a5core.grader:nope")


def test_pool_strict_path_uses_detailed_grader():
    responses = [R("\\boxed{1} \\boxed{2}"), "</think> <answer>5</answer> <answer>5</answer>", R("5")]
    out = grade_batch(responses, ["1", "5", "5"], reward_fn="a5core.grader:r1_zero_strict_reward_fn", workers=1)
    assert [o["status"] for o in out] == ["multiple_answers", "format_error", "correct"]


def test_custom_grader_calling_ours_and_crashing():
    with GraderPool("tests.slow_grader:nested_reward", workers=1, timeout_s=5.0) as pool:
        assert [o["reward"] for o in pool.map([R("2"), R("3")], ["2", "2"])] == [1.0, 0.0]
    with GraderPool("tests.slow_grader:crashing_reward", workers=1, timeout_s=5.0) as pool:
        out = pool.map([R("2"), R("3")], ["2", "2"])
    assert [o["status"] for o in out] == ["error", "error"] and "bug in a custom grader" in out[0]["detail"]


@pytest.mark.parametrize(
    "ans",
    [
        "\\quad \\lfloor 9^(9^9) \\rfloor",
        "\\lfloor 9^[9^9] \\rfloor",
        "\\sin(9^{9^9})",
        "\\Gamma(10^6)",
        "\\lfloor 10^{6}! \\rfloor",
        "\\sin(2^{10^{6}})",
        "\\log(10^{99999})",
        "\\lfloor (10^{100})^{400} \\rfloor",
        "\\sum_{k=1}^{10^{9}} k",
        "\\exp(\\exp(100))",
        "1" + "a" * 40 + "1",
        "\\sin(1)^{\\sin(1)^{9}}",
    ],
)
def test_math_verify_paths_bounded(ans):
    t = time.monotonic()
    r = grade(R(ans), "1")
    assert time.monotonic() - t < BOUND_S and r.reward == 0 and r.status != "timeout", (r, time.monotonic() - t)


def test_handout_hang_input_bounded():
    t = time.monotonic()
    assert r1_zero_reward_fn("<think>x</think> <answer>1" + "a" * 40 + "1</answer>", "11")["reward"] == 0
    assert time.monotonic() - t < BOUND_S


def test_single_call_timeout_restarts_worker(monkeypatch):
    monkeypatch.setattr(single, "SINGLE_CALL_TIMEOUT_S", 0.001)  # this pair needs ~0.1 s of simplification
    r = grade(R("\\tan^2 x + 1"), "\\sec^2 x")
    assert (r.status, r.reward, r.format_reward) == ("timeout", 0.0, 1.0)  # the format part is kept
    monkeypatch.undo()
    assert grade(R("\\frac{2}{4}"), "0.5").status == "correct"  # a fresh worker took over


def test_single_call_worker_that_cannot_start_scores_zero(monkeypatch):
    single.close_single_pool()
    monkeypatch.setattr(pool_mod, "STARTUP_TIMEOUT_S", 0.0)
    r = grade(R("1"), "1")
    assert (r.status, r.reward) == ("error", 0.0) and "did not start" in r.detail
    monkeypatch.undo()
    assert grade(R("1"), "1").status == "correct"  # the next call starts a fresh worker


_ORPHAN_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from a5core.grader.pool import GraderPool
    pool = GraderPool("tests.slow_grader:slow_reward", workers=2, timeout_s=60)
    pool.map(["fast", "fast"], ["1", "1"])
    print(" ".join(str(s.proc.pid) for s in pool.slots), flush=True)
    for s in pool.slots:  # one worker idle in recv(), one busy in an item, when the parent dies
        s.conn.send((pool.batch, 0, "sleep" if s is pool.slots[0] else "fast", "1"))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is gone for our purpose
        return f.read().split()[2] != "Z"


def test_workers_exit_quietly_when_parent_dies():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", _ORPHAN_SCRIPT], check=False, capture_output=True, text=True, timeout=60, cwd=repo
    )
    assert proc.returncode == -signal.SIGKILL
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


def test_interrupted_map_leaves_no_stale_results(monkeypatch):
    with GraderPool("tests.slow_grader:echo_reward", workers=2, timeout_s=30.0) as pool:
        assert [o["reward"] for o in pool.map(["a", "b"], ["a", "b"])] == [1.0, 1.0]
        calls = {"n": 0}
        collect = pool._collect

        def interrupt_second_collect(*args):
            calls["n"] += 1
            if calls["n"] > 1:
                raise KeyboardInterrupt("simulated Ctrl-C")
            return collect(*args)

        monkeypatch.setattr(pool, "_collect", interrupt_second_collect)
        with pytest.raises(KeyboardInterrupt):
            pool.map(["c", "sleep"], ["x", "x"])  # one result in flight, one worker asleep
        assert all(slot.state == "idle" for slot in pool.slots)
        monkeypatch.undo()
        t = time.monotonic()
        assert [o["reward"] for o in pool.map(["d", "e"], ["d", "e"])] == [1.0, 1.0]
        assert time.monotonic() - t < 20


def test_failed_start_up_leaves_no_dead_worker(monkeypatch):
    pool = GraderPool("tests.slow_grader:echo_reward", workers=1)
    monkeypatch.setattr(pool_mod, "STARTUP_TIMEOUT_S", 0.0)
    with pytest.raises(RuntimeError, match="did not start"):
        pool.map(["a"], ["a"])
    assert pool.slots == []
    monkeypatch.undo()
    with pool:
        assert pool.map(["a"], ["a"])[0]["reward"] == 1.0


def _grade_in_daemon(timeout_s: float) -> dict:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=slow_grader.daemon_grade, args=(child, timeout_s), daemon=True)
    proc.start()
    try:
        assert parent.poll(120), "the daemonic grader did not answer"
        return parent.recv()
    finally:
        proc.kill()
        proc.join()


def test_daemonic_process_grades_under_an_alarm():
    r = _grade_in_daemon(0.001)  # a daemonic process cannot start a worker: SIGALRM bounds the inline grading
    assert (r["status"], r["reward"], r["format_reward"]) == ("timeout", 0.0, 1.0)
    assert _grade_in_daemon(60.0)["status"] == "correct"


def test_unbounded_inline_grading_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(single, "_warned_unbounded", False)
    out = []
    for _ in range(2):
        th = threading.Thread(target=lambda: out.append(single._grade_inline_bounded(R("2"), "2", "r1_zero")))
        th.start()
        th.join(60)
    assert [o["status"] for o in out] == ["correct", "correct"]
    assert sum("without a time limit" in rec.getMessage() for rec in caplog.records) == 1


def test_the_grader_map_examples_hold():
    """The one example per step in a5core/grader/__init__.py's docstring is what the code does."""
    from a5core.grader.bounds import Rejected
    from a5core.grader.equivalence import answers_equal
    from a5core.grader.extract import extract_r1_zero
    from a5core.grader.latex_gate import parse_latex
    from a5core.grader.normalize import normalize, screen
    from a5core.grader.parse import Unparsable, parse_math

    assert extract_r1_zero("...</think> <answer>\\boxed{\\dfrac12}</answer>") == (True, "\\dfrac12", "")
    assert normalize("\\dfrac12") == "\\frac{1}{2}" and normalize("10,\\!000") == "10000"
    with pytest.raises(Rejected):
        screen(normalize("9^{9^{9}}"))
    assert str(parse_math("\\frac{1}{2}")) == "1/2" and str(parse_latex("\\cot x")) == "cot(x)"
    with pytest.raises(Unparsable):
        parse_math("\\cot x")  # only latex2sympy reads it
    assert answers_equal("0.5", "\\frac{1}{2}") and not answers_equal("(1,2)", "(2,1)")


def test_latex_gate_is_what_grades_log_and_trig_forms_equal():
    """Without the gate, equal answers written with log/trig/floor score wrong (the reason it is kept)."""
    from bench.latex_gate_share import flipped_pairs

    result = flipped_pairs()
    flipped = {(f["answer"], f["ground_truth"]) for f in result["flips"]}
    assert ("\\log_2 8", "3") in flipped and ("\\sin(x)", "\\sin x") in flipped
    assert all(f["gate_on"] and not f["gate_off"] for f in result["flips"])  # it only ever accepts
