"""Custom reward functions for the pool tests, imported by name in grader workers ("tests.support.slow_grader:<fn>";
'sleep' never finishes in time)."""

import time


def slow_reward(response, ground_truth):
    if response == "sleep":
        time.sleep(60)
    return {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}


def nested_reward(response, ground_truth):
    """A custom grader that calls ours: inside a grader worker it must grade inline (no child process)."""
    from a5core.grader import r1_zero_reward_fn

    return r1_zero_reward_fn(response, ground_truth)


def crashing_reward(response, ground_truth):
    """A custom grader with a bug: the pool reports status `error` instead of losing the worker."""
    raise RuntimeError("bug in a custom grader")


def echo_reward(response, ground_truth):
    """1.0 iff the response is the ground truth ('sleep' first sleeps): shows which batch a result came from."""
    if response == "sleep":
        time.sleep(60)
    ok = float(response == ground_truth)
    return {"format_reward": 1.0, "answer_reward": ok, "reward": ok}


def daemon_grade(conn, timeout_s):
    """Run `grade` in a daemonic process (which cannot start a grader worker) with a given single-call limit."""
    from a5core.grader import grade, single

    single.SINGLE_CALL_TIMEOUT_S = timeout_s
    conn.send(grade("</think> <answer>\\tan^2 x + 1</answer>", "\\sec^2 x").to_dict())
