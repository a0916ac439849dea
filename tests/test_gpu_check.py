"""bench/gpu_check.py, the one GPU measurement of the full profile's policy side, run here on a tiny Qwen2 on CPU:
every part runs, the plan's parameter formula matches the real Qwen2 module, and generation returns every token."""

import importlib.util
from pathlib import Path

import torch

from a5core import grpo, sft
from a5core.config import from_dict
from a5core.model_io import build_tiny_model

SPEC = importlib.util.spec_from_file_location("gpu_check", Path(__file__).parents[1] / "bench" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_check)


def test_gpu_check_runs_every_part_on_a_tiny_qwen2():
    _, tokenizer = build_tiny_model()
    arch = {
        "model_type": "qwen2",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "vocab_size": len(tokenizer),
        "tie_word_embeddings": True,
    }
    gcfg = from_dict(
        grpo.GRPOConfig,
        {
            "rollout_batch_size": 8,
            "group_size": 4,
            "train_batch_size": 8,
            "gradient_accumulation_steps": 4,
            "max_tokens": 16,
        },
        "grpo",
    )
    scfg = from_dict(sft.SFTConfig, {"batch_size": 4, "micro_batch_size": 2}, "sft")
    saved = []
    real_peak = gpu_check.peak

    def peak(fn):  # a card too small for micro-batch 8: the sweep records it and measures the others
        if len(saved) == 4 and fn.args[2].gradient_accumulation_steps == 1:  # the sweep is the fifth part
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_peak(fn)

    gpu_check.peak = peak
    try:
        result = gpu_check.check(
            arch, gcfg, scfg, tokenizer, torch.device("cpu"), gen_tokens=6, sweep_rollouts=8, save=saved.append
        )
    finally:
        gpu_check.peak = real_peak
    assert len(saved) == 5 and saved[0] is result  # written after every part, so a failing part loses nothing
    assert result["sweep_out_of_memory"] == ["micro8_autocast1"] and "sweep_s_micro8_autocast1" not in result
    assert result["parameters"] == result["plan_parameters"]  # a5core.plan's count is the real Qwen2 module's
    assert result["grpo_measured_gb"] is None and result["grpo_predicted_gb"] > 0  # no CUDA allocator here
    assert result["grpo_micro_batch"] == [2, 300 + 16] and result["sft_micro_batch"] == [2, 300 + 1500]
    assert result["grpo_step_s"] > 0 and result["sft_step_s"] > 0 and result["old_log_probs_s"] > 0
    assert result["gen_samples"] == 8 and result["gen_tokens"] == 8 * 6  # min_tokens = max_tokens: full length
    assert result["sweep_s_micro2_autocast1"] > 0 and result["sweep_gb_micro2_autocast0"] is None
    assert "sweep_s_micro16_autocast1" not in result  # larger than train_batch_size: skipped
    assert 0 <= result["sweep_logprob_max_abs_diff"] < 0.05  # bf16 weights: autocast changes little or nothing
    assert result["profile_operator_calls"] > 100 and result["profile_gpu_busy_s"] == 0  # no CUDA kernels here
