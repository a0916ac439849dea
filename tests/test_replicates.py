"""a5core.report.replicates: the hierarchical interval and test against hand-computed cases, the config's rules, and the
replicate files the summary reads."""

import json

import pytest

from a5core.base.stats import N_BOOTSTRAP, bootstrap_mean, paired_test
from a5core.config.sections import ConfigError
from a5core.report.replicates import (
    ReplicatesConfig,
    hierarchical_interval,
    hierarchical_test,
    replicate_scores,
    score_matrix,
)

QUESTIONS = [f"q{i}" for i in range(40)]


def scores(correct: set[int], n: int = 40) -> dict[str, float]:
    return {f"q{i}": float(i in correct) for i in range(n)}


def test_one_seed_is_the_question_bootstrap():
    run = scores(set(range(0, 40, 3)))  # 14 of 40
    h = hierarchical_interval([run])
    lo, hi = bootstrap_mean(list(run.values()))
    assert h["mean"] == 14 / 40 and h["seeds"] == 1 and h["seed_sd"] == 0.0 and h["between_share"] == 0.0
    assert abs(h["lo"] - lo) < 0.05 and abs(h["hi"] - hi) < 0.05  # another RNG, the same bootstrap


def test_identical_seeds_have_no_seed_variance_and_different_ones_widen_the_interval():
    run = scores(set(range(20)))
    same = hierarchical_interval([run, run, run])
    assert same["seed_sd"] == 0.0 and same["between_share"] == 0.0 and same["mean"] == 0.5
    spread = [scores(set(range(4))), scores(set(range(20))), scores(set(range(36)))]  # 0.1, 0.5, 0.9
    h = hierarchical_interval(spread)
    assert h["mean"] == pytest.approx(0.5) and h["seed_sd"] == pytest.approx(0.4)  # SD of 0.1, 0.5, 0.9
    # question-sampling variance of one run's mean: var over questions (ddof 1) / 40, averaged over the seeds
    within = sum(p * (1 - p) * 40 / 39 / 40 for p in (0.1, 0.5, 0.9)) / 3
    assert h["between_share"] == pytest.approx(0.16 / (0.16 + within))
    assert h["hi"] - h["lo"] > same["hi"] - same["lo"] + 0.3  # the seed level dominates


def test_the_hierarchical_test_reduces_to_the_paired_one_and_sees_seed_noise():
    a, b = scores(set(range(30))), scores(set(range(10)))
    delta, lo, hi, p = hierarchical_test([a], [b])
    d2, lo2, hi2, p2 = paired_test(a, b)
    assert delta == d2 == 0.5 and abs(lo - lo2) < 0.05 and abs(hi - hi2) < 0.05
    assert p == p2 == 2 / (N_BOOTSTRAP + 1)  # no draw on the far side: (0 + 1) / (n + 1), twice, never 0
    assert hierarchical_test([a], [a])[3] == 1.0  # nothing differs
    # the same mean difference, but one of the run's two seeds learned nothing: no longer resolved
    delta, lo, hi, p = hierarchical_test([scores(set(range(30))), b], [b, b])
    assert delta == pytest.approx(0.25) and lo <= 0 and p > 0.05


def test_replicates_are_compared_on_the_questions_all_of_them_measured():
    m = score_matrix([{"a": 1.0, "b": 0.0, "c": 1.0}, {"c": 0.0, "a": 1.0}])
    assert m.tolist() == [[1.0, 1.0], [1.0, 0.0]]  # a, c in the first's order
    with pytest.raises(ValueError, match="share no question"):
        score_matrix([{"a": 1.0}, {"b": 1.0}])


def test_the_config_refuses_a_repeated_seed_or_run():
    assert ReplicatesConfig().seeds == () and not ReplicatesConfig(seeds=(1, 2), grpo_runs=("a",)).problems()
    with pytest.raises(ConfigError, match="seeds .* repeats an entry"):
        ReplicatesConfig(seeds=(1, 1), grpo_runs=("a",)).validate()
    with pytest.raises(ConfigError, match="sft_runs .* repeats an entry"):
        ReplicatesConfig(seeds=(1,), sft_runs=("a", "a")).validate()


def test_check_params_refuses_a_replicate_of_a_run_that_does_not_exist(tmp_path):
    from a5core.checks.inputs import replicate_problems

    params = {"grpo_runs": {"a": {}}, "sft_runs": {"s": {}}, "ei_runs": {"G4": {}}}
    params["replicates"] = {"grpo_runs": ["a", "b"], "sft_runs": ["t"], "ei_runs": ["G4", "G9"]}
    assert replicate_problems(params) == [
        "replicates.sft_runs: 't' is not a sft_runs entry (['s'])",
        "replicates.ei_runs: 'G9' is not a ei_runs entry (['G4'])",
        "replicates.grpo_runs: 'b' is not a grpo_runs entry (['a'])",
    ]


def test_replicate_scores_reads_the_configured_seeds_only(tmp_path):
    for folder, acc in (
        ("grpo/r", 1.0),
        ("grpo/r/seed_3", 0.0),
        ("grpo/r/seed_9", 0.5),
        ("sft/s", 0.25),
        ("sft/s/seed_3", 0.75),
        ("ei/e/round_1", 0.0),  # an EI run's result is its last round's
        ("ei/e/round_2", 0.5),
        ("ei/e/seed_3/round_2", 1.0),
    ):
        (tmp_path / folder).mkdir(parents=True)  # seed 9: no longer configured
        (tmp_path / folder / "validation.json").write_text(json.dumps({"per_question": {"q": acc}}))
    cfg = ReplicatesConfig(seeds=(3,), sft_runs=("s",), ei_runs=("e",), grpo_runs=("r",))
    assert replicate_scores(tmp_path, cfg, ei_rounds=2) == {
        ("SFT", "s"): [{"q": 0.25}, {"q": 0.75}],
        ("EI", "e"): [{"q": 0.5}, {"q": 1.0}],
        ("GRPO", "r"): [{"q": 1.0}, {"q": 0.0}],
    }
    assert cfg.stages(ei_rounds=2) == {
        "sft_replicate@s-3",
        "grpo_replicate@r-3",
        "ei_replicate_1@e-3",
        "ei_replicate_2@e-3",
    }
    assert replicate_scores(tmp_path, ReplicatesConfig(grpo_runs=("r",)), 2) == {}  # no extra seed: no replicates
    with pytest.raises(FileNotFoundError, match="seed_4"):
        replicate_scores(tmp_path, ReplicatesConfig(seeds=(3, 4), grpo_runs=("r",)), 2)
    with pytest.raises(FileNotFoundError, match="round_3"):  # a replicate chain that stopped short of the last round
        replicate_scores(tmp_path, ReplicatesConfig(seeds=(3,), ei_runs=("e",)), 3)


def test_the_params_checker_sees_the_replicate_stages_dvc_makes():
    """a5core.checks.inputs expands dvc.yaml's matrices as DVC names them, so an init_policy or a stage's input model
    can be traced to the replicate stage that writes it."""
    from pathlib import Path

    from a5core.config.sections import read_params
    from a5core.run.dvc_stages import dag_outputs, dag_stages

    root = Path(__file__).resolve().parents[1]
    params = read_params(root / "params.yaml")
    params["replicates"] = {
        "seeds": [1, 2],
        "sft_runs": ["full"],
        "ei_runs": ["G4"],
        "grpo_runs": ["reinforce_baseline"],
    }
    names = {name for name, _, _ in dag_stages(params, root)}
    assert {"sft_replicate@full-1", "sft_replicate@full-2", "grpo_replicate@reinforce_baseline-2"} <= names
    assert {"ei_replicate_1@G4-1", "ei_replicate_5@G4-2"} <= names and not any("@G8-" in n for n in names)
    assert not any(n.startswith("grpo_replicate@clip") for n in names)
    outputs = dag_outputs(params, root)
    assert outputs["models/grpo_reinforce_baseline_seed2"] == "grpo_replicate@reinforce_baseline-2"
    assert outputs["results/sft/full/seed_1/validation.json"] == "sft_replicate@full-1"
    assert outputs["models/ei_G4_seed2/round_3"] == "ei_replicate_3@G4-2"
    params["replicates"] = {"seeds": [], "sft_runs": [], "grpo_runs": []}
    assert not any("replicate" in name for name, _, _ in dag_stages(params, root))


def test_the_hierarchical_test_pairs_the_runs_question_by_question():
    """Two runs that agree on 190 of 200 questions (half easy, half hard) and differ on 10 hard ones: paired by
    question, the +0.05 is resolved; were the questions drawn apart for each run, the easy/hard split would swamp
    it (each mean's question SD is 0.035)."""
    many = [f"q{i}" for i in range(200)]
    reference = {q: float(i < 100) for i, q in enumerate(many)}
    run = {q: float(i < 110) for i, q in enumerate(many)}
    delta, lo, hi, p = hierarchical_test([run], [reference])
    assert delta == pytest.approx(0.05) and 0.0 < lo and hi < 0.09 and p < 0.01


def test_the_hierarchical_test_pairs_the_arms_by_question():
    """A run right on the reference's 50 questions and 10 more: every paired difference is >= 0, so the interval
    excludes 0 and no draw falls at or below it. Drawing each arm's questions apart (unpaired) would add both arms'
    question variance (sd ~0.07 against a difference of 0.1; p ~0.15)."""
    run, ref = scores(set(range(60)), 100), scores(set(range(50)), 100)
    delta, lo, hi, p = hierarchical_test([run], [ref])
    assert delta == pytest.approx(0.1) and lo > 0 and p < 0.01
