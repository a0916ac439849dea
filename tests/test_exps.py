"""tools.exps: `dvc exp show` narrowed to an ablation (the params that differ, each run's accuracy and interval)."""

from tools.exps import WIDTH, table

GRPO = "results/grpo/reinforce_baseline/metrics.json:eval/accuracy"
SFT = "results/sft/full/metrics.json:eval/accuracy"


def _row(name, lr, acc, sft=0.2):
    return {
        "Experiment": name, "rev": name or "workspace", "State": None, "grpo.lr": lr, "sft.lr": 2e-4,
        "stages/grpo.py": "abc", GRPO: acc, GRPO + "_lo": acc - 0.05, GRPO + "_hi": acc + 0.05, SFT: sft,
        SFT + "_lo": 0.1, SFT + "_hi": 0.3,
    }  # fmt: skip


def test_only_what_differs_in_a_narrow_table():
    lines = table([_row(None, 3e-6, 0.07), _row("master", 3e-5, 0.125), _row("loamy-meed", 3e-6, 0.07)])
    head = "experiment grpo.lr grpo/reinforce_baseline acc (95%) sft/full acc (95%)"
    assert lines[0].split() == head.split()
    assert lines[2].split() == ["master", "3e-05", "0.125", "(0.075–0.175)", "0.200", "(0.100–0.300)"]
    assert max(map(len, lines)) <= WIDTH


def test_too_many_runs_are_cut_and_say_so():
    rows = [_row(f"e{i}", 10.0**-i, 0.1 * i) for i in range(3)]
    for row in rows:
        for k in range(12):
            row |= {GRPO.replace("reinforce_baseline", f"run_{k}"): 0.01 * k * row[GRPO]}
    lines = table(rows, "grpo")
    assert max(map(len, lines)) <= WIDTH and "--family" in lines[-1]


def test_runs_that_did_not_change_stay_when_they_fit():
    """The smoke model scores the same whatever the lr: the comparison still shows each run's accuracy."""
    lines = table([_row("baseline", 3e-5, 0.0), _row("lr", 3e-6, 0.0)])
    assert "grpo/reinforce_baseline acc (95%)" in lines[0] and "sft/full acc (95%)" in lines[0]
    assert lines[1].split()[:3] == ["baseline", "3e-05", "0.000"]


def test_when_no_accuracy_changed_the_changed_familys_runs_stay():
    """`python -m tools.exps` without --family after an experiment that changed no accuracy (the smoke model): too wide
    for every run, it keeps the runs of the family whose param changed, and says how many it left out."""
    rows = [_row("baseline", 3e-5, 0.0), _row("lr", 3e-6, 0.0)]
    for row in rows:
        for k in range(6):
            row |= {SFT.replace("full", f"size_{k}"): 0.2, SFT.replace("full", f"size_{k}") + "_lo": 0.1}
            row |= {SFT.replace("full", f"size_{k}") + "_hi": 0.3}
    lines = table(rows)
    assert lines[0].split() == ["experiment", "grpo.lr", "grpo/reinforce_baseline", "acc", "(95%)"]
    assert lines[1].split()[:3] == ["baseline", "3e-05", "0.000"] and lines[2].split()[:3] == ["lr", "3e-06", "0.000"]
    assert lines[-1] == "(7 run(s) with the same accuracy in every row left out: --family)"
    assert max(map(len, lines)) <= WIDTH
