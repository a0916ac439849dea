"""vLLM engines synced from fsdp2 shards (the CPU build, 2 torchrun ranks over gloo, one engine per rank through
external_launcher) against one process: each rank's engine loads the policy one gathered tensor at a time
(`distributed.WholeState`), passes the exact check and the log-prob probe, and generates the single process's
greedy tokens; rank 1 keeps no whole copy of the weights, rank 0 keeps one on the CPU for saving. The probe's no-grad
forwards run before the optimizer is made, as a stage's initial validation does: with torch's default for the root
unit (whole after a forward) the optimizer held the root's whole tensors and the embeddings were never trained, which
every test here catches. ~1 min."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from a5core.model.distributed import DistributedConfig
from a5core.model.loading import build_tiny_model
from a5core.stage.launch import command

pytestmark = [pytest.mark.slow, pytest.mark.vllm_engine]

ROOT = Path(__file__).resolve().parents[1]
WORKER = "tests/dist_vllm_worker.py"


def _run(argv: list[str], out: Path, ranks: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "A5_THREADS": "1"}
    proc = subprocess.run(argv + ["--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    errors = [line for line in proc.stderr.splitlines() if "Error" in line]  # each rank's root cause
    assert proc.returncode == 0, "\n".join(errors[:20]) + proc.stderr[-3000:]
    return [torch.load(f"{out}.rank{r}", weights_only=False) for r in range(ranks)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("dist_vllm")
    model, tok = build_tiny_model(seed=0)
    model.save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    args = [WORKER, "--model", str(tmp / "model")]
    single = _run([sys.executable, *args], tmp / "single.pt", 1)
    fsdp2 = _run(command(DistributedConfig(nproc=2, strategy="fsdp2"), args), tmp / "fsdp2.pt", 2)
    return {"single": single[0], "ranks": fsdp2}


def test_each_rank_s_engine_runs_the_single_process_s_weights(runs):
    ref = runs["single"]
    for got in runs["ranks"]:
        assert got["world"] == 2
        assert got["greedy"] == ref["greedy"] and len(ref["greedy"][0]) == 12
        # the engine holds the stepped weights: the exact check against the weights before the step fails
        assert "engine parameters differ from the policy's" in got["stale"]
    assert ref["stale"]


def test_the_saved_weights_are_gathered_on_rank_0_s_cpu_only(runs):
    ref, (rank0, rank1) = runs["single"], runs["ranks"]
    assert rank0["whole_copy"] and rank0["saved_device"] == "cpu"
    assert not rank1["whole_copy"] and rank1["saved"] is None  # rank 1's engine was synced from its shards alone
    assert rank0["saved"].keys() == ref["saved"].keys()
    for name, t in ref["saved"].items():
        assert torch.allclose(rank0["saved"][name], t, rtol=0, atol=1e-6), name


def test_the_optimizer_state_is_checkpointed_after_a_sync(runs):
    """The engine's probe runs no-grad forwards of the sharded policy before the optimizer is made and again before
    the checkpoint (fsdp2 would keep the root unit whole after them by default: the optimizer would hold its whole
    tensors, which the state dict cannot match); every moment maps to its parameter (by name under fsdp2)."""
    ref, rank0 = runs["single"]["moments"], runs["ranks"][0]["moments"]
    names = list(runs["single"]["saved"])
    assert len(rank0) == len(ref) > 0
    by_index = {names[i]: t for i, t in ref.items()}  # one process keys them by index, in parameter order
    for name, t in rank0.items():
        assert torch.allclose(t, by_index[name], rtol=0, atol=1e-6), name
