"""The grader audit (a5core.grader.audit): its verdicts on hand-checked responses, its shares on hand-computed samples,
the order of the top-reward completions, and its pool (separate workers, bounded, off the reward's path)."""

import json
import math

import pytest

from a5core.base.records import GradedSample
from a5core.grader import GraderPool
from a5core.grader.audit import AUDIT_PATH, audit_inline, audit_metrics, top_rewarded, verdicts
from a5core.grader.pool import failed, timeout_result


@pytest.mark.parametrize(
    "response, gt, prompt, strict, verified",
    [
        ("</think> <answer>0.5</answer>", "\\frac{1}{2}", "r1_zero", 1.0, 1.0),
        # math-verify reads `2 3` as 2+3 (a5core/grader/bounds.py): it confirms what our grader refuses
        ("</think> <answer>2 3</answer>", "5", "r1_zero", 0.0, 1.0),
        ("</think> <answer>(2,1)</answer>", "(1,2)", "r1_zero", 0.0, 0.0),
        # r1_zero pays the last of several answer blocks (a hedge); the strict rule (exactly one) does not
        ("</think> <answer>5</answer> </think> <answer>4</answer>", "4", "r1_zero", 0.0, 1.0),
        ("no format at all", "3", "r1_zero", 0.0, None),  # no answer extracted: math-verify has nothing to judge
        ("So it is \\boxed{3}.", "3", "question_only", None, 1.0),  # no stricter rule for question_only
        ("</think> <answer>7</answer>", ["6", "7"], "r1_zero", 1.0, 1.0),  # any acceptable ground truth
    ],
)
def test_verdicts_on_hand_checked_responses(response, gt, prompt, strict, verified):
    assert audit_inline(response, (gt, prompt)) == {"strict_reward": strict, "verified": verified}


def sample(i, *, reward, fmt=1.0, strict=None, verified=None, audited=True):
    return GradedSample(
        f"q{i}", 0, "p", f"r{i}", "1", None, "x", fmt, reward, reward, 8, "stop", "s", "l",
        strict_reward=strict, verified=verified, audited=audited,
    )  # fmt: skip


def test_audit_shares_are_hand_computed():
    samples = [
        sample(0, reward=1.0, strict=1.0, verified=1.0),  # all agree
        sample(1, reward=1.0, strict=0.0, verified=1.0),  # strict refuses a paid response: unconfirmed
        sample(2, reward=0.0, strict=0.0, verified=1.0),  # math-verify confirms what we refuse
        sample(3, reward=0.0, fmt=0.0, strict=0.0, verified=None),  # nothing to verify
        sample(4, reward=1.0, audited=False),  # the audit ran out of time: in no share
    ]
    m = audit_metrics(samples, "rollout")
    assert m == {
        "rollout/audit_vs_strict": 1 / 4,  # sample 1 of the 4 audited with a strict verdict
        "rollout/audit_vs_math_verify": 1 / 3,  # sample 2 of the 3 with a math-verify verdict
        "rollout/audit_unconfirmed": 1 / 4,  # sample 1
        "rollout/audit_format_only": 1 / 4,  # sample 2: format 1, answer 0
        "count/audit_unjudged": 1,
    }
    assert audit_metrics([sample(0, reward=1.0, audited=False)], "eval") == {}  # not audited: nothing logged
    only_question_only = audit_metrics([sample(0, reward=1.0, strict=None, verified=None)], "eval")
    assert math.isnan(only_question_only["eval/audit_vs_strict"]) and only_question_only["count/audit_unjudged"] == 0


def test_top_rewarded_puts_disagreements_first_then_sample_order():
    samples = [
        sample(0, reward=0.0, strict=0.0, verified=1.0),
        sample(1, reward=1.0, strict=1.0, verified=1.0),
        sample(2, reward=1.0, strict=1.0, verified=0.0),  # paid, refused by math-verify
        sample(3, reward=1.0, strict=1.0, verified=1.0),
    ]
    assert [s.unique_id for s in top_rewarded(samples, 3)] == ["q2", "q1", "q3"]
    assert [s.unique_id for s in top_rewarded(samples, 9)] == ["q2", "q1", "q3", "q0"]


def test_a_reply_without_verdicts_is_unaudited():
    assert verdicts(None) == {"strict_reward": None, "verified": None, "audited": False}  # no auditor
    assert verdicts(timeout_result(AUDIT_PATH, "r", ("1", "r1_zero"), "over 5s"))["audited"] is False
    assert verdicts(failed("error", "boom"))["audited"] is False
    assert verdicts({"strict_reward": 1.0, "verified": None}) == {
        "strict_reward": 1.0,
        "verified": None,
        "audited": True,
    }


def test_the_pool_audits_in_its_own_workers_and_leaves_rewards_alone():
    responses = ["</think> <answer>2 3</answer>", "</think> <answer>4</answer> </think> <answer>5</answer>", "none"]
    truths = ["5", "5", "5"]
    with GraderPool(workers=1, timeout_s=10.0) as plain:
        assert plain.auditor is None and plain.audit(responses, truths, "r1_zero") == [None] * 3
        expected = plain.map(responses, truths)
    with GraderPool(workers=1, timeout_s=10.0, audit=True) as pool:
        assert pool.map(responses, truths) == expected  # the audit changes no reward
        workers = [s.proc for s in pool.auditor.slots]
        assert workers and not {w.pid for w in workers} & {s.proc.pid for s in pool.slots}
        replies = pool.audit(responses, truths, "r1_zero")
    assert [verdicts(r) for r in replies] == [
        {"strict_reward": 0.0, "verified": 1.0, "audited": True},
        {"strict_reward": 0.0, "verified": 1.0, "audited": True},
        {"strict_reward": 0.0, "verified": None, "audited": True},
    ]
    assert [g["reward"] for g in expected] == [0.0, 1.0, 0.0]  # r1_zero pays the hedge; strict does not
    assert all(w.poll() is not None for w in workers)  # the auditor's workers ended with the pool


def test_the_audit_table_reads_grpo_and_ei_logs(tmp_path):
    from a5core.run.history import write_csv
    from tools.audit import table

    logs = tmp_path / "grpo" / "r" / "logs"
    logs.mkdir(parents=True)
    shares = {"rollout/audit_vs_strict": 0.1, "rollout/audit_vs_math_verify": 0.0, "rollout/audit_unconfirmed": 0.1}
    write_csv(
        [{"step": 1, "rollout/reward": 0.5, **shares}, {"step": 2, "rollout/reward": 0.7, **shares}], logs / "train.csv"
    )
    write_csv([{"step": 2, "eval/accuracy": 0.25, "eval/audit_unconfirmed": 0.05}], logs / "eval.csv")
    top = [
        {"shown": "top_reward", "reward": 1.0, "strict_reward": 0.0, "verified": 1.0},
        {"shown": "top_reward", "reward": 1.0, "strict_reward": 1.0, "verified": 1.0},
    ]
    (logs / "completions.jsonl").write_text("".join(json.dumps(c) + "\n" for c in top))
    rounds = tmp_path / "ei" / "G4" / "round_2" / "logs"
    rounds.mkdir(parents=True)
    write_csv(
        [{"round": 0, "eval/accuracy": 0.1}, {"round": 1, "eval/accuracy": 0.2, "rollout/audit_unconfirmed": 0.5}],
        rounds / "rounds.csv",
    )
    lines = table(tmp_path).splitlines()
    assert lines[2] == (
        "| grpo r | 0.600 (max 0.700) | 0.100 (max 0.100) | 0.000 (max 0.000) | 0.100 (max 0.100) | 0.250 | — | — "
        "| 0.050 (max 0.050) | 1 of 2 |"
    )
    assert lines[3].startswith("| ei G4 | — | — | — | 0.500 (max 0.500) | 0.200 |") and lines[3].endswith("| 0 of 0 |")
