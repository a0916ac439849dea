"""The plots stage on hand-made results: one summary row per configured run, stale runs ignored."""
import json

import pytest

from a5core.plots import make_plots, summary_markdown


EI_LAST = "{root}/results/ei/{{run}}/round_2"  # the last round's folder holds the whole history


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _results(root):
    _write(root / "baseline" / "metrics.json", json.dumps({"accuracy": 0.0, "format1_answer1": 0, "format1_answer0": 1, "format0_answer0": 7}))
    _write(root / "sft" / "8" / "metrics.json", json.dumps({"accuracy": 0.25, "format_rate": 0.5, "examples": 8}))
    _write(root / "sft" / "8" / "logs" / "eval.csv", "step,accuracy\n1,0.125\n2,0.25\n")
    _write(root / "sft" / "stale" / "metrics.json", json.dumps({"accuracy": 0.9, "format_rate": 1.0, "examples": 99}))
    _write(root / "ei" / "G2" / "round_2" / "metrics.json", json.dumps({"accuracy": 0.5, "round": 2, "initial_accuracy": 0.25}))
    _write(root / "ei" / "G2" / "round_2" / "logs" / "rounds.csv", "round,accuracy,mean_token_entropy\n0,0.25,1.0\n1,0.375,0.9\n2,0.5,0.8\n")
    _write(root / "ei" / "G2" / "round_1" / "metrics.json", json.dumps({"accuracy": 0.375, "round": 1, "initial_accuracy": 0.25}))
    _write(root / "grpo" / "r" / "metrics.json", json.dumps({"accuracy": 0.625, "steps_done": 2}))
    _write(root / "grpo" / "r" / "logs" / "eval.csv", "step,accuracy,wall_s\n0,0.5,0\n2,0.625,10\n")
    _write(root / "grpo" / "r" / "logs" / "train.csv", "step,token_entropy,response_length,grad_norm,clip_fraction\n1,1,5,0.5,0\n")


def test_summary_has_one_row_per_configured_run(tmp_path):
    _results(tmp_path / "results")
    rows = make_plots(tmp_path / "results", tmp_path / "figures", {"sft": ["8"], "ei": ["G2"], "grpo": ["r"]}, EI_LAST.format(root=tmp_path))
    assert [(m, r.split(",")[0], a) for m, r, a, _ in rows] == [("zero-shot", "baseline", 0.0), ("SFT", "8", 0.25), ("EI", "G2", 0.5), ("GRPO", "r", 0.625)]
    assert {f.name for f in (tmp_path / "figures").iterdir()} == {"baseline_categories.png", "sft.png", "ei.png", "grpo.png"}
    assert (tmp_path / "sft_by_size.csv").read_text().splitlines() == ["run,examples,accuracy,format_rate", "8,8,0.25,0.5"]
    md = summary_markdown(rows, "figures")
    assert "| EI | G2, 2 rounds (from 0.250) | 0.500 | [ei.png](figures/ei.png) |" in md
    assert "| GRPO | r, 2 steps (from 0.500 at step 0) | 0.625 | [grpo.png](figures/grpo.png) |" in md


def test_a_configured_run_without_results_is_an_error(tmp_path):
    _results(tmp_path / "results")
    with pytest.raises(FileNotFoundError, match="grpo/missing/metrics.json"):
        make_plots(tmp_path / "results", tmp_path / "figures", {"sft": ["8"], "ei": ["G2"], "grpo": ["r", "missing"]}, EI_LAST.format(root=tmp_path))
