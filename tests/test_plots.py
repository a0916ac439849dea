"""The plots stage on hand-made results: one summary row per configured run with intervals, ablation figures grouped
from the configured overrides, stale runs ignored."""

import json

import pytest
from matplotlib.colors import to_rgba

from a5core.report.plots import Result, ablation_groups, make_plots
from a5core.report.summary import example_rollouts_text, summary_markdown

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
        {"r": {}, "lr": {"lr": 1e-3}, "clip": {"loss_type": "grpo_clip"}},
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
    assert figures == {"baseline_categories.png", "sft.png", "ei.png", "grpo.png", "grpo_lr.png", "grpo_loss_type.png"}
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
    runs = {"base": {}, "lr_a": {"lr": 1}, "lr_b": {"lr": 2}, "clip": {"loss_type": "x", "epochs": 2}}
    assert ablation_groups(runs) == {"lr": ["base", "lr_a", "lr_b"], "epochs+loss_type": ["base", "clip"]}


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
    from a5core.run.evaluation import Evaluation
    from a5core.stage.training import paired_summary, validation_record

    def evaluation(acc: dict, maj: dict) -> Evaluation:
        metrics = {"eval/accuracy": sum(acc.values()) / len(acc), "count/questions": len(acc)}
        return Evaluation([], metrics, {}, acc, [], {"maj@4": maj})

    questions = [f"q{i}" for i in range(40)]
    before = validation_record(evaluation(dict.fromkeys(questions, 0.25), dict.fromkeys(questions, 0.0)), "p", 0)
    assert before["at_k"]["maj@4"]["q0"] == 0.0 and "at_k" not in validation_record(
        Evaluation([], {}, {}, {}, []), "p", 0
    )
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
    from a5core.report import plots

    _results(tmp_path / "results")
    _write(
        tmp_path / "results" / "grpo" / "r" / "seed_1" / "logs" / "eval.csv",
        "step,eval/accuracy,eval/accuracy_lo,eval/accuracy_hi,perf/wall_s\n0,0.5,0.3,0.7,0\n2,0.2,0.1,0.4,10\n",
    )
    figures = {}
    monkeypatch.setattr(plots, "_save", lambda fig, out, name: figures.setdefault(name, fig) and name)
    runs = {"r": {}, "lr": {"lr": 1e-3}}
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", runs, {"r": (1,)})
    accuracy = figures["grpo.png"].axes[0]  # validation accuracy by optimizer step
    lines = {line.get_label(): line for line in accuracy.get_lines()}
    replica = [line for line in accuracy.get_lines() if line.get_label().startswith("_")]  # unlabelled
    assert set(lines) >= {"r", "lr"} and len(replica) == 1
    assert replica[0].get_color() == lines["r"].get_color() and list(replica[0].get_ydata()) == [0.5, 0.2]
    wall = figures["grpo.png"].axes[1]  # every panel draws a run and its replicates in the run's color
    assert [line.get_color() for line in wall.get_lines()] == [lines["r"].get_color()] * 2 + [lines["lr"].get_color()]


def test_ei_seed_replicates_are_drawn_from_their_own_chain_s_last_round(tmp_path, monkeypatch):
    from a5core.report import plots

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


def _grpo_run(root, name, steps=4, audit=0.0, wall=True):
    """A GRPO run's logs: whole-set evaluations (8 questions) at 0 and `steps`, the subset (4) every 2 steps between."""
    evals = sorted({0, *range(2, steps, 2), steps})
    header = "step,eval/accuracy,eval/accuracy_lo,eval/accuracy_hi,count/questions,eval/audit_unconfirmed"
    rows = [f"{s},0.{s},0.0,0.9,{8 if s in (0, steps) else 4},0.0" for s in evals]
    _write(root / "grpo" / name / "logs" / "eval.csv", "\n".join([header, *rows]) + "\n")
    header = "step,train/entropy,rollout/response_tokens,train/grad_norm,rollout/reward,rollout/audit_vs_math_verify"
    rows = [f"{s},{6.3821 + s * 1e-6},16,0.5,0,{audit if s == 1 else 0.0}" for s in range(1, steps + 1)]
    _write(root / "grpo" / name / "logs" / "train.csv", "\n".join([header, *rows]) + "\n")
    if wall:
        _write(
            root / "grpo" / name / "logs" / "timing_eval.csv",
            "step,perf/wall_s\n" + "".join(f"{s},{s * 1.5}\n" for s in evals),
        )
    _metrics(root / "grpo" / name / "metrics.json", accuracy=0.5, steps_done=steps)


def _figures(monkeypatch):
    """Every figure a call draws, by name (not saved)."""
    from a5core.report import plots

    figures = {}
    monkeypatch.setattr(plots, "_save", lambda fig, out, name: figures.__setitem__(name, fig) or name)
    return figures


def _run_lines(fig) -> dict[str, tuple]:
    """Each labelled run line's (colour, line style), checking one run has one style in every panel of `fig`."""
    styles = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                style = (line.get_color(), line.get_linestyle())
                assert styles.setdefault(line.get_label(), style) == style, line.get_label()
    return styles


def test_run_styles_number_runs_within_a_family_and_stay_distinct_past_twelve():
    from a5core.report.plots import PALETTE, run_styles

    keys = [f"grpo/run{i}" for i in range(14)] + ["sft/full", "ei/G4"]
    styles = run_styles(keys)
    grpo = [styles[f"grpo/run{i}"] for i in range(14)]
    assert len({s.color for s in grpo[:12]}) == 12 and len(set(PALETTE)) == 12
    assert len({(s.color, s.linestyle) for s in grpo}) == 14  # the 13th run on: the next line style
    assert styles["sft/full"].color == styles["ei/G4"].color == PALETTE[0]  # each figure draws one family


def test_one_style_per_run_in_every_panel_and_figure(tmp_path, monkeypatch):
    figures = _figures(monkeypatch)
    names = [f"run{i}" for i in range(13)]
    for name in names:
        _grpo_run(tmp_path / "results", name)
    _results(tmp_path / "results")
    overrides = {name: ({"loss_type": name} if i % 2 else {"lr": i}) if i else {} for i, name in enumerate(names)}
    make_plots(
        tmp_path / "results",
        tmp_path / "figures",
        {"sft": ["8"], "ei": ["G2"]},
        overrides,
        EI_LAST.format(root=tmp_path),
    )
    assert {"grpo.png", "grpo_loss_type.png", "grpo_lr.png"} <= set(figures)
    every = _run_lines(figures["grpo.png"])
    assert set(every) == set(names) and len(set(every.values())) == 13  # 13 runs, 13 styles
    for name in ("grpo_loss_type.png", "grpo_lr.png"):
        ablation = _run_lines(figures[name])
        assert ablation == {k: every[k] for k in ablation} and "run0" in ablation  # the same style as in grpo.png
    legend = [t.get_text() for t in figures["grpo.png"].legends[0].get_texts()]
    assert legend[:13] == names and "validation, mid-run subset (4 questions)" in legend
    curve, bars = figures["sft.png"].axes
    assert [p.get_facecolor() for p in bars.patches][0] == to_rgba(_run_lines(figures["sft.png"])["8"][0])


def test_seed_replicates_are_named_once_in_the_legend(tmp_path, monkeypatch):
    from a5core.report import plots

    figures = _figures(monkeypatch)
    _grpo_run(tmp_path / "results", "r")
    for s in (1, 2, 3):
        _grpo_run(tmp_path / "results" / "grpo" / "r", f"seed_{s}")
        (tmp_path / "results" / "grpo" / "r" / "grpo" / f"seed_{s}").rename(
            tmp_path / "results" / "grpo" / "r" / f"seed_{s}"
        )
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", {"r": {}}, {"r": (1, 2, 3)})
    legend = [t.get_text() for t in figures["grpo.png"].legends[0].get_texts()]
    assert legend[:2] == ["r", "r, seeds 1-3 (thin)"]
    accuracy = figures["grpo.png"].axes[0]
    assert [line.get_label() for line in accuracy.get_lines()] == ["r", *["_replicate"] * 3]


def test_audit_panels_are_drawn_only_when_some_share_is_not_zero(tmp_path, monkeypatch):
    from a5core.report import plots

    figures = _figures(monkeypatch)
    for name, audit in (("zero", 0.0), ("flagged", 0.25)):
        _grpo_run(tmp_path / name, "r", audit=audit)
        plots.grpo_figures(tmp_path / name, tmp_path / "figures", {"r": {}})
        figures[name] = figures.pop("grpo.png")
    titles = {name: [ax.get_title() for ax in figures[name].axes] for name in ("zero", "flagged")}
    audits = [p.title for p in plots.GRPO_PANELS if p.audit]
    assert len(titles["zero"]) == 6 and not set(audits) & set(titles["zero"])  # a 2 x 3 figure
    assert "Grader audit zero" in figures["zero"]._supxlabel.get_text()
    assert set(audits) & set(titles["flagged"]) == {"rollouts: our grader vs math-verify"}


def test_step_axes_have_integer_ticks_and_plain_labels(tmp_path, monkeypatch):
    from a5core.report import plots

    figures = _figures(monkeypatch)
    _grpo_run(tmp_path / "results", "r", steps=3)  # entropy 6.382101 to 6.382103: an offset axis before
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", {"r": {}})
    _results(tmp_path / "results")
    plots.ei_figure(EI_LAST.format(root=tmp_path), tmp_path / "figures", ["G2"])
    plots.sft_figure(tmp_path / "results", tmp_path / "figures", ["8"])
    steps = 0
    for fig in figures.values():
        fig.canvas.draw()
        for ax in fig.axes:
            if ax.get_xlabel() in ("optimizer step", "EI round (0 = starting policy)"):
                ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
                assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
                steps += 1
            assert ax.yaxis.get_major_formatter().get_offset() == "", ax.get_title()
            labels = [t.get_text() for t in ax.get_yticklabels()]
            assert all(len(t.split(".")[-1]) <= 3 for t in labels if "." in t), (ax.get_title(), labels)
    assert steps == 5 + 2 + 1  # GRPO's but wall-clock, EI's two, SFT's curve
    entropy = next(ax for ax in figures["grpo.png"].axes if ax.get_title() == "response entropy")
    assert entropy.get_ylim()[1] - entropy.get_ylim()[0] > 0.1  # a flat curve is not magnified into noise


def test_every_evaluation_is_drawn_and_the_subset_ones_are_hollow(tmp_path, monkeypatch):
    from a5core.report import plots

    figures = _figures(monkeypatch)
    _grpo_run(tmp_path / "results", "r", steps=6)
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", {"r": {}})
    accuracy = figures["grpo.png"].axes[0]
    (line,) = accuracy.get_lines()
    assert list(line.get_xdata()) == [0, 2, 4, 6] and line.get_markevery() == [0, 3]  # filled: the whole set
    (hollow,) = accuracy.collections[:1]
    assert [list(p) for p in hollow.get_offsets()] == [[2, 0.2], [4, 0.4]]
    legend = [t.get_text() for t in figures["grpo.png"].legends[0].get_texts()]
    assert "validation, whole set (8 questions)" in legend and "validation, mid-run subset (4 questions)" in legend


def test_wall_clock_comes_from_the_run_records_when_given(tmp_path, monkeypatch):
    from a5core.report import plots

    figures = _figures(monkeypatch)
    _grpo_run(tmp_path / "results", "r", wall=False)
    _grpo_run(tmp_path / "results" / "grpo" / "r", "seed_1", wall=False)
    (tmp_path / "results" / "grpo" / "r" / "grpo" / "seed_1").rename(tmp_path / "results" / "grpo" / "r" / "seed_1")
    records = tmp_path / "run_records"
    _write(records / "grpo" / "r" / "timing_eval.csv", "step,perf/wall_s\n0,0\n2,5\n4,9\n")
    _write(records / "grpo_replicate" / "r" / "seed_1" / "timing_eval.csv", "step,perf/wall_s\n0,0\n2,6\n4,11\n")
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", {"r": {}}, {"r": (1,)}, records=records)
    wall = next(ax for ax in figures["grpo.png"].axes if ax.get_xlabel() == "wall-clock time (s)")
    assert [list(line.get_xdata()) for line in wall.get_lines()] == [[0, 5, 9], [0, 6, 11]]
    plots.grpo_figures(tmp_path / "results", tmp_path / "figures", {"r": {}}, {"r": (1,)})  # not in the logs
    assert "No data, not drawn: validation accuracy vs wall-clock" in figures["grpo.png"]._supxlabel.get_text()


def _completion(step: int, q: str, reward: float, response: str = "r", shown: str = "first") -> dict:
    prompt = f"Instructions.\nUser: What is {q}?\nAssistant: <think>"
    return {"step": step, "shown": shown, "unique_id": q, "prompt": prompt, "response": response,
            "ground_truth": "4", "reward": reward}  # fmt: skip


def test_the_example_question_is_the_first_whose_reward_changed():
    rows = [_completion(0, "q1", 0.0), _completion(0, "q2", 0.0, "wrong"), _completion(0, "q3", 0.0)]
    rows += [_completion(2, "q1", 0.0), _completion(2, "q2", 0.0)]  # a mid evaluation: not the last
    rows += [_completion(4, "q2", 1.0, "right ```x```"), _completion(4, "q1", 0.0), _completion(4, "q3", 1.0)]
    rows += [_completion(4, "q9", 1.0, shown="top_reward"), _completion(0, "q9", 0.0, shown="top_reward")]
    text = "\n".join(example_rollouts_text("run", rows))
    assert "question `q2`" in text and "What is q2?" in text and "Instructions" not in text
    assert "Before GRPO (step 0), reward 0.0:" in text and "After GRPO (step 4), reward 1.0:" in text
    assert "````text\nright ```x```\n````" in text  # a fence the response cannot close
    assert "Question (answer `4`):" in text
    same = [_completion(0, "q1", 1.0), _completion(0, "q2", 0.0), _completion(3, "q2", 0.0), _completion(3, "q1", 1.0)]
    assert "question `q1`" in "\n".join(example_rollouts_text("run", same))  # none changed: the first question
    assert example_rollouts_text("run", [_completion(3, "q1", 1.0)]) == []  # no step-0 completions: no example


def test_the_summary_shows_the_examples_after_the_table():
    metrics = {"eval/accuracy": 0.5, "eval/accuracy_lo": 0.4, "eval/accuracy_hi": 0.6, "count/questions": 40,
               "count/samples_per_question": 1}  # fmt: skip
    examples = ["", "## A validation question before and after GRPO"]
    summary = summary_markdown([Result("GRPO", "r", metrics, "grpo.png")], "figures", examples=examples)
    assert summary.endswith("## A validation question before and after GRPO\n")


def test_the_training_reward_is_a_running_mean_over_grpo_steps_with_its_t_band(tmp_path, monkeypatch):
    from a5core.report import plots

    figures = _figures(monkeypatch)
    root = tmp_path / "results"
    _grpo_run(root, "on", steps=3)
    _grpo_run(root, "off", steps=3)
    header = "step,count/grpo_step,train/entropy,rollout/response_tokens,train/grad_norm,rollout/reward"
    on = [f"{s},{s},1,16,0.5,{r}" for s, r in ((1, 0.0), (2, 0.5), (3, 1.0))]
    off = [f"{s},{(s + 1) // 2},1,16,0.5,{r}" for s, r in ((1, 0.0), (2, 0.0), (3, 0.5), (4, 0.5), (5, 1.0), (6, 1.0))]
    _write(root / "grpo" / "on" / "logs" / "train.csv", "\n".join([header, *on]) + "\n")
    _write(root / "grpo" / "off" / "logs" / "train.csv", "\n".join([header, *off]) + "\n")
    panels = tuple(
        plots.Panel(p.log, p.x, p.y, p.ylabel, p.title, p.audit, 2 if p.window else 0) for p in plots.GRPO_PANELS
    )
    monkeypatch.setattr(plots, "GRPO_PANELS", panels)
    plots.grpo_figures(root, tmp_path / "figures", {"on": {}, "off": {"loss_type": "grpo_clip"}})
    reward = next(ax for ax in figures["grpo.png"].axes if ax.get_title().startswith("training reward"))
    lines = {line.get_label(): line for line in reward.get_lines()}
    # each GRPO step's value once (the off-policy run's two optimizer steps share it), x its last optimizer step;
    # from the first full window on
    assert list(lines["on"].get_xdata()) == [2, 3] and list(lines["off"].get_xdata()) == [4, 6]
    for line in lines.values():  # running means over the last 2 steps: (0 + 0.5)/2, (0.5 + 1)/2
        assert list(line.get_ydata()) == pytest.approx([0.25, 0.75])
    from matplotlib.collections import FillBetweenPolyCollection, PathCollection

    bands = [c for c in reward.collections if isinstance(c, FillBetweenPolyCollection)]
    assert len(bands) == 2  # one per run; the half width at step 3: t(1) 12.706 x sd 0.35355 / sqrt 2 = 3.1765
    top = max(v[1] for v in bands[0].get_paths()[0].vertices)
    assert top == pytest.approx(0.75 + 3.1765, abs=1e-3)
    dots = [c for c in reward.collections if isinstance(c, PathCollection)]
    assert sorted(len(c.get_offsets()) for c in dots) == [3, 6]  # every logged step's own value, faint


def test_a_run_shorter_than_the_window_gets_one_mean_over_all_its_steps():
    from a5core.report.plots import running_mean

    rows = [{"step": s, "rollout/reward": r} for s, r in ((1, 0.0), (2, 0.5), (3, 1.0))]
    (row,) = running_mean(rows, "step", "rollout/reward", 5)
    # mean 0.5, sd 0.5, t(2) 4.303: half 4.303 x 0.5 / sqrt 3 = 1.24217
    assert row["step"] == 3 and row["rollout/reward"] == 0.5
    assert row["rollout/reward_hi"] == pytest.approx(0.5 + 1.24217, abs=1e-5)
    assert running_mean([], "step", "rollout/reward", 5) == []  # a run that logged no reward yet
