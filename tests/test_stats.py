"""Intervals against hand-computed cases, and the evaluation's per-question unit."""

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from a5core.base.stats import (
    accuracy_interval,
    bootstrap_mean,
    holm,
    majority_index,
    min_detectable_difference,
    paired_difference,
    paired_test,
    pass_at_k,
    per_question,
    t_interval,
    wilson,
)
from a5core.config.sections import EvalConfig
from a5core.model.microbatch import Cut
from a5core.run.evaluation import evaluate_policy
from tests.support.loops import ROWS, StubBackend, StubPool


def test_wilson_matches_hand_computed_values():
    # 5/10: centre (0.5 + 1.9208/10)/(1 + 3.8415/10) = 0.5; half = 1.96 sqrt(0.025 + 0.009604)/1.38415 = 0.26341
    assert wilson(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    # 0/48 (the zero-shot baseline here): upper bound 3.8415/(48 + 3.8415) = 0.074100
    lo, hi = wilson(0, 48)
    assert lo == 0.0 and hi == pytest.approx(3.841459 / 51.841459, abs=1e-6)
    assert wilson(48, 48)[1] == 1.0 and wilson(48, 48)[0] == pytest.approx(1 - hi, abs=1e-9)


def test_bootstrap_is_degenerate_where_it_must_be_and_close_to_normal_elsewhere():
    assert bootstrap_mean([0.5] * 20) == (0.5, 0.5)
    values = [i % 4 / 3 for i in range(400)]  # mean 0.5, sd ~0.3727
    lo, hi = bootstrap_mean(values)
    se = math.sqrt(sum((v - 0.5) ** 2 for v in values) / 399 / 400)
    assert lo == pytest.approx(0.5 - 1.96 * se, abs=0.01) and hi == pytest.approx(0.5 + 1.96 * se, abs=0.01)
    assert bootstrap_mean(values, seed=1) == bootstrap_mean(
        values, seed=1
    )  # seeded: the same scores, the same interval


def test_paired_difference_cancels_question_difficulty():
    before = {f"q{i}": float(i % 2) for i in range(40)}  # half the questions always solved
    after = {**before, "q0": 1.0, "q2": 1.0, "q4": 1.0, "q6": 1.0}  # four more solved, nothing lost
    diff, lo, hi = paired_difference(after, before)
    assert diff == pytest.approx(0.1) and lo > 0 and hi <= 0.2
    # the same change judged by two independent intervals overlaps: pairing is what resolves it
    assert wilson(24, 40)[0] < wilson(20, 40)[1]
    with pytest.raises(ValueError, match="share no question"):
        paired_difference({"a": 1.0}, {"b": 1.0})


def test_per_question_scores_and_accuracy_interval_choice():
    scores = per_question([("a", 1.0), ("a", 0.0), ("b", 1.0), ("b", 1.0)])
    assert scores == {"a": 0.5, "b": 1.0}
    assert accuracy_interval({"a": 1.0, "b": 0.0}, 1) == wilson(1, 2)
    assert accuracy_interval(scores, 2) == bootstrap_mean([0.5, 1.0])


def test_min_detectable_difference_by_hand():
    # (1.96 + 0.8416) sqrt(2 * 0.25 / (1 * 100)) = 2.8016 * 0.070711 = 0.19810
    assert min_detectable_difference(100, 1, 0.5) == pytest.approx(0.19810, abs=1e-4)
    assert min_detectable_difference(100, 4, 0.5) == pytest.approx(0.19810 / 2, abs=1e-4)


def test_evaluation_treats_questions_as_the_unit(tiny):
    model, tok = tiny
    backend = StubBackend(tok, [" good", " bad", " bad"])  # sample j of every prompt is texts[j % 3]
    cfg = EvalConfig(samples_per_example=3, reward_fn="a5core.grader:r1_zero_reward_fn")
    result = evaluate_policy(model, tok, backend, ROWS[:4], cfg, StubPool(), progress=False, cut=Cut())
    assert len(result.samples) == 12 and [s.sample_index for s in result.samples[:3]] == [0, 1, 2]
    m = result.metrics
    assert (m["count/questions"], m["count/samples_per_question"], m["count/samples"]) == (4, 3, 12)
    assert m["eval/accuracy"] == pytest.approx(1 / 3) and result.per_question == {
        f"q{i}": pytest.approx(1 / 3) for i in range(4)
    }
    assert (
        m["eval/accuracy_lo"] == m["eval/accuracy_hi"] == pytest.approx(1 / 3)
    )  # every question scores 1/3: no spread
    # one correct of three: pass@2 = 1 - C(2,2)/C(3,2) = 2/3, pass@3 = 1; the vote is "bad" (2 of 3): maj@3 = 0
    assert (m["eval/pass@2"], m["eval/pass@3"], m["eval/maj@3"]) == (pytest.approx(2 / 3), 1.0, 0.0)
    assert m["eval/pass@2_lo"] == m["eval/pass@2_hi"] == pytest.approx(2 / 3)
    assert set(result.at_k) == {"pass@2", "pass@3", "maj@3"}
    assert result.at_k["maj@3"] == {f"q{i}": 0.0 for i in range(4)}


def test_holm_adjusts_step_down_in_input_order():
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0] and holm([]) == []


def test_paired_test_has_the_paired_interval_and_a_bootstrap_p():
    before = {f"q{i}": 0.0 for i in range(20)}
    after = {f"q{i}": float(i < 12) for i in range(20)}  # 12 of 20 questions gained, none lost
    delta, lo, hi, p = paired_test(after, before)
    assert (delta, lo, hi) == paired_difference(after, before) and delta == pytest.approx(0.6)
    assert p < 0.001  # no resampled mean of twelve ones and eight zeros reaches 0
    mixed = {f"q{i}": float(i % 2) for i in range(20)}
    assert paired_test(mixed, {f"q{i}": float(i % 2 == 0 or i == 1) for i in range(20)})[3] > 0.5  # -1/20: noise
    assert paired_test(before, before)[3] == 1.0


def test_seeds_average_evaluation_noise_and_their_spread_sets_a_floor():
    one = min_detectable_difference(64, 1, 0.3)
    assert min_detectable_difference(64, 1, 0.3, seeds=3) == pytest.approx(min_detectable_difference(192, 1, 0.3))
    spread = min_detectable_difference(10**9, 1, 0.3, seeds=3, seed_sd=0.05)  # evaluation noise gone: seeds alone
    assert spread == pytest.approx((1.959963984540054 + 0.8416) * math.sqrt(2 * 0.05**2 / 3))
    assert min_detectable_difference(64, 1, 0.3, seed_sd=0.05) > one


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert (pass_at_k(4, 0, 4), pass_at_k(4, 1, 4), pass_at_k(4, 3, 2), pass_at_k(4, 2, 1)) == (0.0, 1.0, 1.0, 0.5)
    for bad in ((4, 1, 0), (4, 1, 5), (4, 5, 2)):
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(*bad)


@given(st.lists(st.booleans(), min_size=1, max_size=8), st.data())
def test_pass_at_k_is_the_mean_over_every_k_subset(correct, data):
    """The estimator equals the exact share of k-subsets of the n samples holding a correct one (its definition)."""
    n, k = len(correct), data.draw(st.integers(1, len(correct)))
    subsets = list(itertools.combinations(correct, k))
    assert pass_at_k(n, sum(correct), k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12)


def test_majority_vote_ties_go_to_the_answer_seen_first_and_no_answer_does_not_vote():
    assert majority_index(["1", "2", "2"]) == 1
    assert majority_index(["2", "1", "1", "2"]) == 0  # 2 against 2: "2" appeared first
    assert majority_index([None, None, "3"]) == 2 and majority_index([None, None]) is None


def test_at_k_scores_vote_on_normalized_answers():
    from a5core.base.records import GradedSample
    from a5core.run.evaluation import at_k_scores, summarize

    def sample(uid, j, extracted, correct):
        r = float(correct)
        return GradedSample(uid, j, "p", "r", "1/2", extracted, "x", 1.0, r, r, 8, "stop", "s", "l")

    samples = [  # q0: "\\dfrac12" and "\\frac{1}{2}" are one answer (2 votes, correct) against "3" (1 vote)
        sample("q0", 2, "3", False), sample("q0", 0, "\\dfrac12", True), sample("q0", 1, "\\frac{1}{2}", True),
        sample("q1", 0, None, False), sample("q1", 1, "7", False), sample("q1", 2, "x" * 10**6, False),
    ]  # fmt: skip
    at_k = at_k_scores(samples, 3)
    assert at_k == {"pass@2": {"q0": 1.0, "q1": 0.0}, "pass@3": {"q0": 1.0, "q1": 0.0}, "maj@3": {"q0": 1.0, "q1": 0.0}}
    assert at_k_scores(samples, 1) == {}
    metrics, _, _ = summarize(samples, 3)
    assert metrics["eval/maj@3"] == 0.5 and (metrics["eval/maj@3_lo"], metrics["eval/maj@3_hi"]) == (0.0, 1.0)
    assert not any("@" in k for k in summarize(samples, 1)[0])  # one sample: avg@1 alone, nothing added


def test_maj_at_k_votes_over_the_answers_the_grader_judged_equal():
    """Issue 44's example: [0.5, 3, 1/2, 3, \\frac{1}{2}] against 1/2. The grader marks 3 of 5 correct; as strings
    "3" would win 2 to 1, but the three correct answers are one class judged equal to the ground truth: maj@5 = 1."""
    from a5core.base.records import GradedSample
    from a5core.run.evaluation import at_k_scores

    answers = ["0.5", "3", "1/2", "3", "\\frac{1}{2}"]
    samples = [
        GradedSample("q", j, "p", "r", "1/2", a, "x", 1.0, float(a != "3"), float(a != "3"), 8, "stop", "s", "l")
        for j, a in enumerate(answers)
    ]
    assert at_k_scores(samples, 5)["maj@5"] == {"q": 1.0}
    wrong_split = [*samples[1:2], *samples[3:4], *samples[:1]]  # "3", "3", "0.5": the two 3s win
    assert at_k_scores(wrong_split, 3)["maj@3"] == {"q": 0.0}


def test_maj_at_k_groups_wrong_answers_by_the_graders_equivalence_too():
    """Issue 59's example: truth 2, answers [0.5, 2, 1/2, 2, \\frac{1}{2}]. 0.5, 1/2 and \\frac{1}{2} are one wrong
    answer with three votes against the right one's two: maj@5 = 0 (by text it was 1). The classes come from the real
    grader pool, at most d (d - 1) / 2 comparisons for d distinct wrong answers, the same on a repeat."""
    from a5core.base.records import GradedSample
    from a5core.grader import GraderPool
    from a5core.run.evaluation import at_k_scores

    def sample(uid, j, answer, truth):
        r = float(answer == truth)
        return GradedSample(uid, j, "p", "r", truth, answer, "x", 1.0, r, r, 8, "stop", "s", "l")

    answers = {"q0": ["0.5", "2", "1/2", "2", "\\frac{1}{2}"], "q1": ["1", "0.75", "2", "3/4", "6/8"]}
    truths = {"q0": "2", "q1": "1"}
    samples = [sample(uid, j, a, truths[uid]) for uid, ans in answers.items() for j, a in enumerate(ans)]
    asked: list[int] = []
    with GraderPool(workers=1) as pool:

        def same(pairs):
            asked.append(len(pairs))
            return pool.same_answers(pairs)

        votes = at_k_scores(samples, 5, same)["maj@5"]
        assert votes == {"q0": 0.0, "q1": 0.0} and at_k_scores(samples, 5, pool.same_answers)["maj@5"] == votes
        assert at_k_scores(samples, 5)["maj@5"] == {"q0": 1.0, "q1": 1.0}  # by normalized text: split, 1 wins
        # distinct wrong answers: q0's 0.5, 1/2, \frac{1}{2}; q1's 0.75, 2, 3/4, 6/8: all pairs in one batch
        assert asked == [3 * 2 // 2 + 4 * 3 // 2]
        assert pool.same_answers([("0.5", "1/2"), ("3/4", "0.75"), ("3", "4")]) == [True, True, False]


def test_evaluate_policy_votes_with_its_pools_equivalence(tiny):
    """maj@n through the evaluator itself: three samples answer 2 (right), 0.5 and 1/2 against 2. By text each answer
    has one vote and the first sampled (2) wins; the grader makes 0.5 and 1/2 one class of two votes: maj@3 = 0."""
    from a5core.config.sections import EvalConfig
    from a5core.grader import GraderPool
    from a5core.run.evaluation import evaluate_policy
    from tests.support.loops import StubBackend

    model, tok = tiny
    texts = [f" x </think> <answer>{a}</answer>" for a in ("2", "0.5", "1/2")]
    rows = [{"unique_id": "q", "problem": "What is 1 + 1?", "answer": "2", "subject": "s", "level": "1"}]
    cfg = EvalConfig(samples_per_example=3, grader_workers=1, grader_audit=False)
    with GraderPool(workers=1) as pool:
        result = evaluate_policy(model, tok, StubBackend(tok, texts), rows, cfg, pool, progress=False, cut=Cut())
    assert [s.answer_reward for s in result.samples] == [1.0, 0.0, 0.0]
    assert result.at_k["maj@3"] == {"q": 0.0} and result.metrics["eval/maj@3"] == 0.0


def test_two_samples_make_no_grader_call_for_the_vote():
    """With two samples the wrong answers' classes cannot change maj@2 (both wrong: 0; one of each: a tie, the first
    sampled wins): the vote asks the grader nothing."""
    from a5core.base.records import GradedSample
    from a5core.run.evaluation import at_k_scores

    def sample(j, answer, reward):
        return GradedSample("q", j, "p", "r", "2", answer, "x", 1.0, reward, reward, 8, "stop", "s", "l")

    def never(pairs):
        raise AssertionError(f"asked {pairs}")

    for pair in (("0.5", "1/2"), ("2", "1/2"), ("1/2", "2")):
        samples = [sample(j, a, float(a == "2")) for j, a in enumerate(pair)]
        assert at_k_scores(samples, 2, never)["maj@2"] == at_k_scores(samples, 2)["maj@2"]


def test_t_interval_by_hand():
    # [0, 0.5, 1]: mean 0.5, sd 0.5, t(2) 4.303: half 4.303 x 0.5 / sqrt 3 = 1.24217
    m, lo, hi = t_interval([0.0, 0.5, 1.0])
    assert m == 0.5 and (lo, hi) == pytest.approx((0.5 - 1.24217, 0.5 + 1.24217), abs=1e-5)
    assert t_interval([0.3]) == (0.3, 0.3, 0.3)  # one value: no spread to measure
    half = t_interval([0.0, 1.0] * 20)[2] - 0.5  # 40 values, beyond the table: the normal quantile
    assert half == pytest.approx(1.959964 * math.sqrt(10 / 39) / math.sqrt(40), abs=1e-6)
