"""The plots stage on hand-made results: one summary row per configured run with intervals, ablation figures grouped
from the configured overrides, stale runs ignored."""

import json

import pytest

from a5core.plots import ablation_groups, make_plots
from a5core.summary import summary_markdown

EI_LAST = "{root}/results/ei/{{run}}/round_2"  # the last round's folder holds the whole history
HEAD = {
    "eval/accuracy_lo": 0.1,
    "eval/accuracy_hi": 0.6,
    "eval/format_rate": 0.5,
    "count/questions": 8,
    "count/samples_per_question": 1,
}


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


EVAL_KEYS = {"accuracy", "initial_accuracy", "delta", "delta_lo", "delta_hi", "delta_excludes_zero"}


def _metrics(path, **kw):
    _write(path, json.dumps({**HEAD, **{f"eval/{k}" if k in EVAL_KEYS else k: v for k, v in kw.items()}}))


def _results(root):
    _metrics(root / "baseline" / "metrics.json", accuracy=0.0)
    _write(
        root / "baseline" / "breakdown.json",
        json.dumps({"eval/format1_answer1": 0, "eval/format1_answer0": 1, "eval/format0_answer0": 7}),
    )
    _metrics(
        root / "sft" / "8" / "metrics.json",
        accuracy=0.25,
        examples=8,
        initial_accuracy=0.0,
        delta=0.25,
        delta_lo=0.05,
        delta_hi=0.45,
        delta_excludes_zero=True,
    )
    _write(
        root / "sft" / "8" / "logs" / "eval.csv",
        "step,eval/accuracy,eval/accuracy_lo,eval/accuracy_hi\n0,0,0,0.3\n2,0.25,0.1,0.6\n",
    )
    _metrics(root / "sft" / "stale" / "metrics.json", accuracy=0.9, examples=99)
    _metrics(
        root / "ei" / "G2" / "round_2" / "metrics.json",
        accuracy=0.5,
        round=2,
        initial_accuracy=0.25,
        delta=0.25,
        delta_lo=-0.05,
        delta_hi=0.55,
        delta_excludes_zero=False,
    )
    _write(
        root / "ei" / "G2" / "round_2" / "logs" / "rounds.csv",
        "round,eval/accuracy,eval/accuracy_lo,eval/accuracy_hi,eval/entropy\n0,0.25,0.1,0.5,1.0\n1,0.375,0.2,0.6,0.9\n2,0.5,0.3,0.7,0.8\n",
    )
    for run, acc in (("r", 0.625), ("lr", 0.5), ("clip", 0.4)):
        _metrics(root / "grpo" / run / "metrics.json", accuracy=acc, steps_done=2)
        _write(
            root / "grpo" / run / "logs" / "eval.csv",
            "step,eval/accuracy,eval/accuracy_lo,eval/accuracy_hi,perf/wall_s\n0,0.5,0.3,0.7,0\n2,0.6,0.4,0.8,10\n",
        )
        _write(
            root / "grpo" / run / "logs" / "train.csv",
            "step,train/entropy,rollout/response_tokens,train/grad_norm,rollout/reward\n1,1,5,0.5,0.2\n",
        )


def test_summary_has_one_row_per_configured_run_with_intervals(tmp_path):
    _results(tmp_path / "results")
    results = make_plots(
        tmp_path / "results",
        tmp_path / "figures",
        {"sft": ["8"], "ei": ["G2"]},
        {"r": {}, "lr": {"learning_rate": 1e-3}, "clip": {"loss_type": "grpo_clip"}},
        EI_LAST.format(root=tmp_path),
    )
    assert [(r.method, r.run, r.metrics["eval/accuracy"]) for r in results] == [
        ("zero-shot", "baseline", 0.0),
        ("SFT", "8", 0.25),
        ("EI", "G2", 0.5),
        ("GRPO", "r", 0.625),
        ("GRPO", "lr", 0.5),
        ("GRPO", "clip", 0.4),
    ]
    figures = {f.name for f in (tmp_path / "figures").iterdir()}
    assert figures == {
        "baseline_categories.png",
        "sft.png",
        "ei.png",
        "grpo.png",
        "grpo_learning_rate.png",
        "grpo_loss_type.png",
    }
    assert (tmp_path / "sft_by_size.csv").read_text().splitlines()[1] == "8,8,0.25,0.1,0.6"
    md = summary_markdown(results, "figures")
    assert (
        "| SFT | 8 (8 examples) | 0.250 (0.100–0.600) | +0.250 (+0.050 to +0.450) **✓** | 0.000 "
        "| [sft.png](figures/sft.png) |" in md
    )
    assert "| EI | G2 (2 rounds) | 0.500 (0.100–0.600) | +0.250 (-0.050 to +0.550) | 0.250 |" in md
    assert "8 validation questions x 1 sample(s)" in md and "80% power" in md
    assert "Seed replicates" not in md  # one seed per run: no replicate table
    one = {"mean": 0.6, "lo": 0.4, "hi": 0.8, "seeds": 1, "seed_sd": 0.0, "between_share": 0.0}
    three = {"mean": 0.55, "lo": 0.3, "hi": 0.75, "seeds": 3, "seed_sd": 0.0812, "between_share": 0.456}
    md = summary_markdown(results, "figures", replicates={("GRPO", "r"): three, ("GRPO", "lr"): one})
    assert "Seed replicates" in md and "| GRPO | r | 3 | 0.550 (0.300–0.750) | 0.081 | 0.46 |" in md
    assert "| GRPO | lr |" not in md


def test_ablation_groups_come_from_the_overrides():
    runs = {
        "base": {},
        "lr_a": {"learning_rate": 1},
        "lr_b": {"learning_rate": 2},
        "clip": {"loss_type": "x", "epochs": 2},
    }
    assert ablation_groups(runs) == {"learning_rate": ["base", "lr_a", "lr_b"], "epochs+loss_type": ["base", "clip"]}


def test_a_configured_run_without_results_is_an_error(tmp_path):
    _results(tmp_path / "results")
    with pytest.raises(FileNotFoundError, match="grpo/missing/metrics.json"):
        make_plots(
            tmp_path / "results",
            tmp_path / "figures",
            {"sft": ["8"], "ei": ["G2"]},
            {"r": {}, "missing": {}},
            EI_LAST.format(root=tmp_path),
        )


def test_pass_and_maj_at_k_and_their_paired_changes_reach_the_summary():
    from a5core.evaluation import Evaluation
    from a5core.pipeline import paired_summary, validation_record
    from a5core.plots import Result

    def evaluation(acc: dict, maj: dict) -> Evaluation:
        metrics = {"eval/accuracy": sum(acc.values()) / len(acc), "count/questions": len(acc)}
        return Evaluation([], metrics, {}, acc, [], {"maj@4": maj})

    questions = [f"q{i}" for i in range(40)]
    before = validation_record(evaluation(dict.fromkeys(questions, 0.25), dict.fromkeys(questions, 0.0)), "p")
    assert before["at_k"]["maj@4"]["q0"] == 0.0 and "at_k" not in validation_record(Evaluation([], {}, {}, {}, []), "p")
    after = evaluation(dict.fromkeys(questions, 0.5), {q: float(i < 10) for i, q in enumerate(questions)})
    change = paired_summary(after, before)
    assert change["eval/delta_maj@4"] == 0.25 and change["eval/delta_maj@4_lo"] > 0  # 10 of 40 questions gained
    metrics = {
        "eval/accuracy": 0.5, "eval/accuracy_lo": 0.4, "eval/accuracy_hi": 0.6, "count/questions": 40,
        "count/samples_per_question": 4, "eval/maj@4": 0.25, "eval/maj@4_lo": 0.125, "eval/maj@4_hi": 0.375, **change,
    }  # fmt: skip
    md = summary_markdown([Result("GRPO", "r", metrics, "grpo.png")], "figures")
    assert "| pass@k, maj@n (95% CI) |" in md
    assert "maj@4 0.250 (0.125–0.375), change +0.250 (" in md and md.count("**✓**") == 2, md


def test_seed_replicates_are_drawn_as_thin_lines_of_their_run_s_color(tmp_path, monkeypatch):
    from a5core import plots

    _results(tmp_path / "results")
    _write(
        tmp_path / "results" / "grpo" / "r" / "seed_1" / "logs" / "eval.csv",
        "step,eval/accuracy,eval/accuracy_lo,eval/accuracy_hi,perf/wall_s\n0,0.5,0.3,0.7,0\n2,0.2,0.1,0.4,10\n",
    )
    figures = {}
    monkeypatch.setattr(plots, "_save", lambda fig, out, name: figures.setdefault(name, fig) and name)
    runs = {"r": {}, "lr": {"learning_rate": 1e-3}}
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", runs, {"r": (1,)})
    accuracy = figures["grpo.png"].axes[0]  # validation accuracy by optimizer step
    lines = {line.get_label(): line for line in accuracy.get_lines()}
    replica = [line for line in accuracy.get_lines() if line.get_label().startswith("_")]  # unlabelled
    assert set(lines) >= {"r", "lr"} and len(replica) == 1
    assert replica[0].get_color() == lines["r"].get_color() and list(replica[0].get_ydata()) == [0.5, 0.2]
    wall = figures["grpo.png"].axes[1]  # every panel draws a run and its replicates in the run's color
    assert [line.get_color() for line in wall.get_lines()] == [lines["r"].get_color()] * 2 + [lines["lr"].get_color()]


def test_ei_seed_replicates_are_drawn_from_their_own_chain_s_last_round(tmp_path, monkeypatch):
    from a5core import plots

    _results(tmp_path / "results")
    _write(
        tmp_path / "results" / "ei" / "G2" / "seed_1" / "round_2" / "logs" / "rounds.csv",
        "round,eval/accuracy,eval/entropy\n0,0.25,1.0\n1,0.125,1.1\n2,0.0,1.2\n",
    )
    figures = {}
    monkeypatch.setattr(plots, "_save", lambda fig, out, name: figures.setdefault(name, fig) and name)
    plots.ei_figure(EI_LAST.format(root=tmp_path), tmp_path / "figures", ["G2"], {"G2": (1,)})
    accuracy, entropy = figures["ei.png"].axes[:2]
    run, replica = accuracy.get_lines()
    assert run.get_label() == "G2" and replica.get_label().startswith("_")  # the replicate is thin and unlabelled
    assert replica.get_color() == run.get_color() and list(replica.get_ydata()) == [0.25, 0.125, 0.0]
    assert list(entropy.get_lines()[1].get_ydata()) == [1.0, 1.1, 1.2]
    with pytest.raises(FileNotFoundError):  # a configured replicate that did not run
        plots.ei_figure(EI_LAST.format(root=tmp_path), tmp_path / "figures", ["G2"], {"G2": (1, 2)})
