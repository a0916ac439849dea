"""bench/gpu_check.py, the one GPU measurement of the full profile's policy side, run here on a tiny Qwen2 on CPU:
every part runs, the plan's parameter formula matches the real Qwen2 module, and generation returns every token."""

import importlib.util
from pathlib import Path

import torch

from a5core.config.sections import from_dict, load_yaml
from a5core.model.loading import build_tiny_model
from a5core.rl import grpo, sft


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _bench("gpu_check")
gpu_budget = _bench("gpu_budget")


def _tiny_qwen2(vocab: int) -> dict:
    return {
        "model_type": "qwen2",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "vocab_size": vocab,
        "tie_word_embeddings": True,
    }


def test_gpu_check_runs_every_part_on_a_tiny_qwen2():
    _, tokenizer = build_tiny_model()
    arch = _tiny_qwen2(len(tokenizer))
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
    assert result["parameters"] == result["plan_parameters"]  # a5core.run.plan's count is the real Qwen2 module's
    assert result["grpo_measured_gb"] is None and result["grpo_predicted_gb"] > 0  # no CUDA allocator here
    assert result["grpo_micro_batch"] == [2, 300 + 16] and result["sft_micro_batch"] == [2, 300 + 1500]
    assert result["grpo_step_s"] > 0 and result["sft_step_s"] > 0 and result["old_log_probs_s"] > 0
    assert result["gen_samples"] == 8 and result["gen_tokens"] == 8 * 6  # min_tokens = max_tokens: full length
    assert result["sweep_s_micro2_autocast1"] > 0 and result["sweep_gb_micro2_autocast0"] is None
    assert "sweep_s_micro16_autocast1" not in result  # larger than train_batch_size: skipped
    assert 0 <= result["sweep_logprob_max_abs_diff"] < 0.05  # bf16 weights: autocast changes little or nothing
    assert result["profile_operator_calls"] > 100 and result["profile_gpu_busy_s"] == 0  # no CUDA kernels here


def test_gpu_budget_measures_each_compute_setting_and_the_fsdp2_path_on_a_tiny_qwen2():
    """bench/gpu_budget.py on CPU (gloo): every compute setting takes the same step (bf16: loss and gradient norm
    within 2% of the handout split's), the plan gives each a budget, and the fsdp2 path on a mesh of one returns
    whole weights equal to its shards and a whole state dict."""
    _, tokenizer = build_tiny_model()
    arch = _tiny_qwen2(len(tokenizer))
    params = load_yaml((Path(__file__).parents[1] / "tests/fixtures/profiles/full.yaml").read_text())
    small = {"rollout_batch_size": 8, "group_size": 4, "train_batch_size": 8, "gradient_accumulation_steps": 4}
    params["grpo"] = {**params["grpo"], **small, "max_tokens": 24}  # responses of 16-24 tokens: padded pairs
    params["grpo_runs"] = {}
    gcfg = from_dict(grpo.GRPOConfig, params["grpo"], "grpo")
    saved = []
    result = gpu_budget.check(arch, gcfg, params, tokenizer, torch.device("cpu"), 0.05, "all", 8, saved.append)
    assert saved[-1] is result and len(saved) >= 6 and saved[0]["device"] == "cpu"  # written after every setting
    handout = result["budget_handout"]
    assert handout["micro_batch_tokens"] is None and handout["micro_batches"] == 4 and handout["logits_chunk"] == 0
    for name in ("auto", "auto_packed", "auto_grouped", "auto_checkpointing"):
        row = result[f"budget_{name}"]
        assert row["micro_batch_tokens"] >= 24 + 300 and row["logits_chunk"] == 1024 and row["plan_gb"] > 0, row
        assert abs(row["grad_norm"] - handout["grad_norm"]) <= 0.02 * handout["grad_norm"], (name, row, handout)
        assert abs(row["loss"] - handout["loss"]) <= 0.02 * abs(handout["loss"]) + 1e-3, (name, row, handout)
        assert row["peak_gb"] is None and row["step_s"] > 0 and row["gpu_busy_share"] == 0  # no CUDA here
    assert result["budget_auto_packed"]["padding_fraction"] == 0 < handout["padding_fraction"]
    assert result["dist_backend"] == "gloo" and result["all_reduce_unchanged"] and result["all_reduce_gb"] > 0
    assert result["fsdp2_full_weights_max_abs_diff"] == 0 and result["fsdp2_step_s"] > 0
    assert result["fsdp2_state_dict_tensors"] >= len(
        list(gpu_check.build_model(arch, torch.device("cpu")).state_dict())
    )
    items = result["fsdp2_plan_items_gb"]
    assert items["fsdp2: whole-weights copy"] == items["weights"] > 0  # one rank: the shard is the whole model
