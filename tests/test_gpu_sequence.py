"""The GPU sequence (bench/gpu/step.sh, issue 47 item 3) dry-run on this CPU: the same four steps, as a user runs them
on the lent machine, at tiny sizes (a Qwen2-shaped tiny model, vLLM's CPU build, this environment's packages).

Step 0 receives a bundle of hand-made wheels part by part and installs it; steps 1-3 run the vLLM check, the learner
checks and one GRPO step through the real stage, each under its own limit, each leaving its outputs under $OUT.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.wheels import make_wheel
from tools import offline_bundle as ob

pytestmark = [pytest.mark.slow, pytest.mark.vllm_engine]

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_sequence_runs_end_to_end_on_the_cpu(tmp_path):
    out, work, site = tmp_path / "out", tmp_path / "work", tmp_path / "site"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    made = [make_wheel(wheels, "a5probe", "1.0", {"a5probe/__init__.py": "x = 1\n" + "# pad\n" * 400})]
    manifest = ob.pack(made, tmp_path / ".bundle", 1500, {"vllm": "none"})
    env = {
        **os.environ,
        "OUT": str(out),
        "A5_GPU_WORK": str(work),
        "A5_SITE": str(site),
        "A5_GPU_DRY_RUN": "1",
        "PYTHON": sys.executable,
    }

    def step(*args: str) -> subprocess.CompletedProcess:
        cmd = ["bash", str(ROOT / "bench" / "gpu" / "step.sh"), *args]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    parts = [str(tmp_path / ".bundle" / f"p{i}") for i in range(len(manifest["parts"]))]
    assert len(parts) >= 2
    for i, part in enumerate(parts):
        done = step("0", part)
        assert done.returncode == 0, done.stdout + done.stderr
        assert ("installed 1 wheels" in done.stdout) == (i == len(parts) - 1), done.stdout
    assert (site / "a5probe" / "__init__.py").exists()
    assert json.loads((site / "a5-bundle.json").read_text())["imports"]["a5core"] == "ok"

    for n in ("1", "2", "3"):
        done = step(n)
        assert done.returncode == 0, f"step {n}:\n" + done.stdout[-3000:] + done.stderr[-2000:]
    check = json.loads((out / "vllm_check.json").read_text())["layouts"]["cpu"]
    assert check["passed"] == ["build", "sync", "cycles", "seeds", "timing"]
    assert json.loads((out / "learner_distributed.json").read_text())["fsdp2_full_weights_max_abs_diff"] == 0.0
    assert "grpo_predicted_gb" in json.loads((out / "learner_memory.json").read_text())
    assert {"budget_handout", "budget_auto"} <= set(json.loads((out / "learner_budget.json").read_text()))
    grpo = json.loads((out / "grpo_step.json").read_text())
    assert {"perf/sync_s", "perf/rollout_s", "perf/old_log_probs_s", "perf/optimizer_s"} <= set(grpo)
    assert grpo["optimizer_steps"] >= 1 and "eval/accuracy" in grpo["metrics"]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0] * len(parts) + [1, 2, 3] and all(s["rc"] == 0 for s in steps)
