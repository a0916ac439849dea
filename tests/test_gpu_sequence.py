"""The GPU machine's calls (bench/gpu/run.py, bench/gpu/README.md) rehearsed on this CPU, as a user runs them there:
the learner-first call, then the vLLM bundle's parts and the vLLM call, each at tiny sizes (a Qwen2-shaped tiny
model, the hf backend and vLLM's CPU build, this environment's packages, a hand-made bundle in parts).

Each call must leave at most 8 files under $OUT (what a device call brings back): its summary, log and archive, with
every part's status and what it measured.
"""

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from bench.gpu import run as driver
from tests.support.wheels import make_wheel
from tools import offline_bundle as ob

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMES = {"sync_s", "rollout_s", "grade_s", "old_log_probs_s", "optimizer_s"}


def bundle(tmp_path: Path, name: str, part_bytes: int) -> list[Path]:
    """A bundle of one hand-made wheel, in parts of `part_bytes` (what `tools.offline_bundle build` writes)."""
    wheels = tmp_path / f"wheels_{name}"
    wheels.mkdir()
    made = [make_wheel(wheels, f"a5probe_{name}", "1.0", {f"a5probe_{name}/__init__.py": "x = 1\n" + "# pad\n" * 400})]
    manifest = ob.pack(made, tmp_path / ".bundle" / name, part_bytes, {"vllm": "none"})
    return [tmp_path / ".bundle" / name / f"p{i}" for i in range(len(manifest["parts"]))]


def call(tmp_path: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """One device call's command, with its own empty $OUT (as the device tool gives each call)."""
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "A5_GPU_WORK": str(tmp_path / "work"), "A5_SITE": str(tmp_path / "site")}
    cmd = [sys.executable, str(ROOT / "bench" / "gpu" / "run.py"), *args, "--dry-run"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, files
    summary = json.loads((out / "summary.json").read_text())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert summary["failed"] == [] and summary["skipped"] == [], summary
    return done, summary


def test_a_part_over_the_time_left_is_killed_and_the_rest_skipped(tmp_path):
    """The budget holds the whole call: a part gets min(its cap, the time left), is killed with what it started when
    over it, and a part that would not get its `need` is skipped; the summary says which."""
    (tmp_path / "logs").mkdir()
    call = driver.Call("learner", tmp_path, tmp_path, tmp_path, dry=False, budget_s=driver.PACK_S + 30)
    child = tmp_path / "child.pid"

    def gone() -> bool:  # the grandchild went with its part's session (gone, or a zombie), within a second
        status = Path(f"/proc/{child.read_text()}/status")
        for _ in range(20):
            if not status.exists() or "State:\tZ" in status.read_text():
                return True
            time.sleep(0.05)
        return False

    def starts_a_sleeper(then: str) -> list[str]:
        return [sys.executable, "-c", f"import os, subprocess, time; open({str(child)!r}, 'w').write(str("
                f"subprocess.Popen(['sleep', '60']).pid)); {then}"]  # fmt: skip

    env = dict(os.environ)
    assert driver.run_part(call, driver.Part("leaves", [starts_a_sleeper("pass")], 100, 0.1), env) == "ok"
    assert gone()  # a command that ended leaves nothing of its session running (GPU memory included)
    assert driver.run_part(call, driver.Part("slow", [starts_a_sleeper("time.sleep(60)")], 100, 0.1), env, 25.0) == (
        "timeout"
    )
    assert call.summary["parts"]["slow"]["limit_s"] <= 5  # the 30 s left less the 25 s kept for the parts after it
    assert gone()
    assert driver.run_part(call, driver.Part("next", [["true"]], 100, 5), {}, 30.0) == "skipped"  # none left
    assert json.loads((tmp_path / "summary.json").read_text())["parts"]["next"]["status"] == "skipped: no time"


def check_the_learner_call(tmp_path: Path) -> None:
    parts = bundle(tmp_path, "learner", 1 << 20)
    assert len(parts) == 1  # one carry beside the tree
    out = tmp_path / "out_learner"
    done, summary = call(tmp_path, out, "learner", "--bundle", str(parts[0]))
    assert sorted(p.name for p in out.iterdir()) == ["learner.log", "learner.tar.gz", "summary.json"]
    got = summary["parts"]
    assert list(got) == ["probe", "install", "model", "grpo", "grpo_summary", "numerics", "distributed"]
    assert all(p["status"] == "ok" and p["seconds"] <= p["limit_s"] for p in got.values()), got
    assert got["probe"]["result"]["packages"]["torch"] and "disk_free_gib" in got["probe"]["result"]
    assert got["install"]["result"]["imports"]["a5core"] == "ok"
    grpo = got["grpo_summary"]["result"]
    assert [s["grpo_step"] for s in grpo["steps"]] == [1, 2]  # one optimizer step per GRPO step
    assert all(STEP_TIMES <= set(s) for s in grpo["steps"]), grpo["steps"]
    assert set(grpo["plan_gb"]) == {"GPU 0 while generating (hf backend)", "GPU 0 while training"}
    assert "eval/accuracy" in grpo["metrics"]
    numerics = got["numerics"]["result"]
    assert numerics["response_tokens"] > 0 and 0 < numerics["logprob_gap_max_abs"] < 1.0  # bf16 is not float32
    assert got["distributed"]["result"]["fsdp2_full_weights_max_abs_diff"] == 0.0
    with tarfile.open(out / "learner.tar.gz") as tar:
        names = tar.getnames()
    assert {"logs/grpo.log", "grpo.json", "probe.json", "numerics.json"} <= set(names), names
    assert any(n.endswith("record/timing_train.csv") for n in names)


def check_the_vllm_calls(tmp_path: Path) -> None:
    parts = bundle(tmp_path, "vllm", 1500)
    assert len(parts) >= 2
    for i, part in enumerate(parts[:-1]):
        done, summary = call(tmp_path, tmp_path / f"out_receive{i}", "receive", str(part))
        assert "waiting for" in done.stdout.lower() or summary["parts"]["receive"]["status"] == "ok"
    out = tmp_path / "out_vllm"
    done, summary = call(tmp_path, out, "vllm", "--bundle", str(parts[-1]))
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "vllm.log", "vllm.tar.gz"]
    got = summary["parts"]
    assert list(got) == ["install", "probe", "model", "vllm_check", "vllm_eager", "grpo_vllm", "grpo_vllm_summary"]
    assert (tmp_path / "site" / "a5probe_vllm" / "__init__.py").exists()
    assert got["install"]["result"]["imports"]["a5core"] == "ok"
    assert "reusing" in (tmp_path / "work" / "vllm" / "logs" / "model.log").read_text()  # the learner call's model
    probe = got["probe"]["result"]
    assert probe["imports"]["a5core.stage.training"] == "ok"
    assert probe["vllm"]["engine_environment"]["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and probe["vllm"]["version"]
    check = got["vllm_check"]["result"]["layouts"]["cpu"]
    assert check["passed"] == ["build", "sync", "cycles", "seeds", "optimizer_step", "timing"]
    assert got["vllm_eager"]["result"]["layouts"]["cpu"]["passed"] == ["build", "timing"]
    grpo = got["grpo_vllm_summary"]["result"]
    assert len(grpo["steps"]) == 1 and all(STEP_TIMES <= set(s) for s in grpo["steps"])
    with tarfile.open(out / "vllm.tar.gz") as tar:  # this call's files alone, not the learner call's before it
        assert not any(n.startswith("grpo/") or n == "numerics.json" for n in tar.getnames()), tar.getnames()


@pytest.mark.slow
@pytest.mark.vllm_engine
def test_both_sequences_run_back_to_back_on_one_machine_as_the_readme_lists_them(tmp_path):
    """bench/gpu/README.md's calls in order on one warm machine (one work folder): the learner's call, then the vLLM
    bundle's parts and its call, which reuses the model the first one built and keeps its parts apart from the
    learner bundle's."""
    check_the_learner_call(tmp_path)
    check_the_vllm_calls(tmp_path)
