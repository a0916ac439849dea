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
from tests.support import slow_grader
from tests.support.grader_cases import (
    EQUIV,
    FORMAT,
    HOSTILE,
    NOTATION,
    REDTEAM_DIFFERENT,
    REDTEAM_EQUAL,
    REDTEAM_SLOW,
    STRICT_FORMAT,
    UNIVERSAL,
    R,
)

BOUND_S = 2.0
ZERO = {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


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
    with GraderPool("tests.support.slow_grader:slow_reward", workers=1, timeout_s=1.0) as pool:
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
    with GraderPool("tests.support.slow_grader:nested_reward", workers=1, timeout_s=5.0) as pool:
        assert [o["reward"] for o in pool.map([R("2"), R("3")], ["2", "2"])] == [1.0, 0.0]
    with GraderPool("tests.support.slow_grader:crashing_reward", workers=1, timeout_s=5.0) as pool:
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
    pool = GraderPool("tests.support.slow_grader:slow_reward", workers=2, timeout_s=60)
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
    with GraderPool("tests.support.slow_grader:echo_reward", workers=2, timeout_s=30.0) as pool:
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
    pool = GraderPool("tests.support.slow_grader:echo_reward", workers=1)
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
