"""The full profile's code path, end to end on a CPU: `profiles` full-mini (conf/profile/full-mini.yaml) differs from
full.yaml only in sizes and the model's source; it reads MATH-format JSONL files from data/external/math/ (the fixture
files here), generates with the real vLLM engine (its CPU build) and syncs weights into it before every rollout phase,
and runs the whole DAG: baseline, SFT, five EI rounds, GRPO with each loss type and the question_only prompt, plots."""

import json
import shutil
from pathlib import Path

import pytest

from tests.support.repos import ok, ran_stages, scratch_repo

FIXTURES = Path(__file__).parent / "fixtures" / "math"
pytestmark = [pytest.mark.slow, pytest.mark.dag, pytest.mark.vllm_engine]


def test_full_mini_dag_runs_the_full_code_path_on_the_real_engine(tmp_path):
    work, run = scratch_repo(tmp_path, "full-mini")
    (work / "data" / "external" / "math").mkdir(parents=True)
    for f in FIXTURES.glob("*.jsonl"):
        shutil.copy(f, work / "data" / "external" / "math" / f.name)
    r = run("dvc", "repro")
    ok(r)
    ran = ran_stages(r)
    grpo = {
        f"grpo@{k}"
        for k in ("lr_1e-5", "no_baseline", "offpolicy_e2_tb128", "offpolicy_noclip_e2_tb128", "question_only")
    }
    assert {"baseline_eval", "sft@128", "sft@filtered", "ei_round_5@db1024_G4_e1", "plots"} | grpo <= ran, ran
    out = r.stdout + r.stderr
    assert "Reloading and processing weights" in out  # the engine received the policy's weights (vLLM's log line)
    report = json.loads((work / "data" / "prepared" / "report.json").read_text())
    assert report["validation"] == 16 and report["train"] == 40
    for run_name in ("lr_1e-5", "question_only"):
        details = json.loads((work / "results" / "grpo" / run_name / "details.json").read_text())
        assert details["steps_done"] == 2 and details["count/questions"] == 16
        assert list((work / "results" / "grpo" / run_name / "live" / "tensorboard").glob("events.out.tfevents.*"))
    summary = (work / "reports" / "summary.md").read_text()
    assert "trained and validated with the question_only prompt" in summary
    assert (work / "reports" / "figures" / "grpo_lr.png").exists() is False  # one lr run here
    assert (work / "reports" / "figures" / "grpo_loss_type.png").exists()
    saved = work / "models" / "grpo_lr_1e-5"
    assert json.loads((saved / "generation_config.json").read_text())["stop_strings"] == ["</answer>"]
    assert "chat_template" in (saved / "tokenizer_config.json").read_text() or (saved / "chat_template.jinja").exists()
