"""The verified reward: a table of equivalence, format, reward-hack and hostile cases."""
import threading
import time

import pytest

from a5core.grader import grade, grade_batch, question_only_reward_fn, r1_zero_reward_fn
from a5core.grader.pool import GraderPool, load_reward_fn

BOUND_S = 2.0


def R(ans: str) -> str:
    return f"Let me think. </think> <answer>{ans}</answer>"


# (answer inside <answer>, ground truth, expected answer reward)
EQUIV = [
    ("\\frac{1}{2}", "0.5", 1), ("0.5", "\\frac12", 1), ("\\dfrac{3}{4}", "0.75", 1), ("\\tfrac{3}{4}", "\\frac{3}{4}", 1),
    ("3/4", "\\frac{3}{4}", 1), ("0.333", "\\frac{1}{3}", 0), ("10\\%", "10", 1), ("10%", "10", 1), ("1,000", "1000", 1),
    ("1{,}000", "1000", 1), ("12,345,678", "12345678", 1), ("1.5e3", "1500", 1), ("1.5\\times 10^{3}", "1500", 1),
    ("5\\text{ cm}", "5", 1), ("5 \\text{ inches}", "5", 1), ("5 cm", "5", 1), ("\\$5", "5", 1), ("\\$5.00", "5", 1),
    ("90^\\circ", "90", 1), ("90^{\\circ}", "90", 1), ("x = 3", "3", 1), ("x=-2", "-2", 1), ("\\sqrt{8}", "2\\sqrt{2}", 1),
    ("\\sqrt2/2", "\\frac{\\sqrt{2}}{2}", 1), ("\\pi/2", "\\frac{\\pi}{2}", 1), ("2\\pi", "\\pi \\cdot 2", 1),
    ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}", 0), ("1.0000001", "1", 0), ("3.14", "\\pi", 0), ("c+d", "a+d", 0),
    ("e - 5", "5", 0), ("2x+1", "1+2x", 1), ("x^2-1", "(x-1)(x+1)", 1), ("(1,2)", "(1,2)", 1), ("(2,1)", "(1,2)", 0),
    ("(1,2]", "(1,2]", 1), ("[1,2)", "(1,2]", 0), ("(1,2)", "[1,2]", 0), ("\\{1,2\\}", "\\{2,1\\}", 1), ("\\{1,3\\}", "\\{2,1\\}", 0),
    ("-2, 1", "1, -2", 1), ("1, 2", "1, 2, 3", 0), ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{bmatrix}1 & 2 \\\\ 3 & 4\\end{bmatrix}", 1),
    ("\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", 0), ("B", "B", 1), ("(B)", "B", 1),
    ("\\text{(C)}", "C", 1), ("D", "C", 0), ("\\frac{6}{8}", "\\frac{3}{4}", 1), ("-\\frac{80}{9}", "-10", 0), ("-10", "-10", 1),
    ("2 or 3", "2", 0), ("1, 2, 3", "2", 0), ("\\pm 2", "2", 0), ("x > 5", "5", 0), ("2 and 3", "2", 0), ("\\pm 2", "\\pm 2", 1),
    ("(-\\infty, 3)", "(-\\infty,3)", 1), ("[0, 1] \\cup [2, 3]", "[0,1]\\cup[2,3]", 1), ("\\sin(x)", "\\sin x", 1),
    ("0.1", "\\frac{1}{10}", 1), ("100", "100.0", 1), ("007", "7", 1), ("-0", "0", 1), ("2^{10}", "1024", 1),
    ("\\left(1, 2\\right)", "(1,2)", 1), ("\\boxed{7}", "7", 1), ("\\boxed{7} and \\boxed{8}", "7", 0), ("\\boxed{7} \\boxed{7}", "7", 1),
]

FORMAT = [  # (full response, ground truth, format reward, answer reward)
    (R("5"), "5", 1, 1), (R("6"), "5", 1, 0), ("no tags at all 5", "5", 0, 0), ("</think> <answer>5", "5", 0, 0),
    ("</think> <answer>5</answer> trailing text", "5", 0, 0), ("</think> <answer>5</answer> <answer>5</answer>", "5", 0, 0),
    ("</think> <answer><answer>5</answer></answer>", "5", 0, 0), ("<answer>5</answer>", "5", 0, 0),
    ("x </think>\n\n<answer> 5 </answer>\n", "5", 1, 1), ("</think></think> <answer>5</answer>", "5", 0, 0),
    ("</think> <answer></answer>", "5", 1, 0), ("</think> <answer>5</answer></think>", "5", 0, 0),
]

HOSTILE = ["9**9**9**9", "(10**9)!", "2**2**2**2**2**2", "9^{9^{9^9}}", "\\text{" * 32000, "1" * 100_000, "(" * 500 + "1" + ")" * 500,
           "(1).__class__", "__import__('os').system('echo pwned')", "2^{100000000}", "10^{10^{10}}", "x^{99999999}",
           "\\frac{1}{0}", "Ы + 1", "lambda: 1", "1e999999"]


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


def test_status_separates_parse_failures():
    assert grade("no format", "1").status == "format_error"
    assert grade(R("\\boxed{1} \\boxed{2}"), "1").status == "multiple_answers"
    assert grade(R("9**9"), "1").status == "rejected_input"
    assert grade(R("3"), "4").status == "wrong"
    assert grade(R("\\unknowncommand{3}"), "4").status == "unparsable"
    d = grade(R("\\dfrac{1}{2}"), "0.5")
    assert d.status == "correct" and d.extracted == "\\dfrac{1}{2}" and d.normalized_pred == "\\frac{1}{2}"


def test_ground_truth_forms():
    assert r1_zero_reward_fn(R("12"), 12)["reward"] == 1
    assert r1_zero_reward_fn(R("12"), ["twelve", "12"])["reward"] == 1


def test_question_only():
    assert question_only_reward_fn("so the answer is \\boxed{\\frac{1}{2}}", "0.5")["reward"] == 1
    assert question_only_reward_fn("first \\boxed{3} then \\boxed{4}", "4")["reward"] == 1
    assert question_only_reward_fn("the total is 42", "42")["reward"] == 1
    assert question_only_reward_fn("no numbers here", "42") == {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


def test_pluggable_reward_fn_path():
    assert load_reward_fn("a5core.grader:r1_zero_reward_fn") is r1_zero_reward_fn
    with pytest.raises(ValueError, match="module:function"):
        load_reward_fn("a5core.grader.r1_zero_reward_fn")
    with pytest.raises(ValueError, match="not a callable"):
        load_reward_fn("a5core.grader:nope")
