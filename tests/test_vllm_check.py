"""bench/vllm_check.py, the GPU machine's first check, run here on the real vLLM CPU engine at tiny sizes.

Marked `vllm_engine` (a missing engine fails it). It runs the script as a user does, in its own process (an engine
per process: the module-scoped one of test_vllm_engine.py may still be alive in this one); ~45 s.
"""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

pytestmark = pytest.mark.vllm_engine

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, sharp):
    """The sharp tiny Llama with random projection biases (so fused q/k/v and gate/up are compared exactly)."""
    config = copy.deepcopy(sharp[0].config)
    config.attention_bias, config.mlp_bias = True, True
    torch.manual_seed(2)
    model = LlamaForCausalLM(config)
    model.load_state_dict(sharp[0].state_dict(), strict=False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.5)
    folder = tmp_path_factory.mktemp("check_model")
    model.save_pretrained(folder)
    sharp[1].save_pretrained(folder)
    return folder


def test_vllm_check_runs_green_on_the_cpu_engine(model_folder, tmp_path):
    out = tmp_path / "vllm_check.json"
    args = ["--model", str(model_folder), "--out", str(out), "--prompts", "4", "--n", "2", "--max-tokens", "16"]
    args += ["--greedy-prompts", "3", "--greedy-tokens", "12", "--perturb", "0.05"]
    run = subprocess.run([sys.executable, str(ROOT / "bench/vllm_check.py"), *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cpu = json.loads(out.read_text())["layouts"]["cpu"]
    assert cpu["passed"] == ["build", "sync", "cycles", "seeds", "optimizer_step", "timing"]
    assert cpu["sync"]["compared"] == 14  # embedding, 5 norms, 2 layers x (qkv, o, gate_up, down) biases
    assert len(cpu["cycles"]["cycles"]) == 3 and "unsupported on the CPU build" in cpu["cycles"]["sleep"]
    for cycle in cpu["cycles"]["cycles"]:
        assert cycle["equal"] == 3 and cycle["probe_nats"] < 1e-4
    assert cpu["seeds"] == {"seeded_repeat_equal": True, "samples_differ": True, "prefix_cache_reset": [True, True]}
    assert 0 < cpu["timing"]["tokens"] <= 4 * 2 * 16 and cpu["timing"]["tokens_per_s"] > 0
    step = cpu["optimizer_step"]  # a real AdamW step moved the weights; the engine took them, exactly
    assert step["parameters_moved"] > 0 and step["compared"] == 14 and step["probe_nats"] < 1e-4
