"""LoRA through PEFT (model.lora_rank; a5core/model/lora.py): adapters only are trained, merged weights are what the
engine and every saved model folder get, SFT and GRPO train with them, and a killed GRPO run resumes bit-identically."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from a5core.model import lora
from a5core.model.compute import Compute
from a5core.model.optim import make_optimizer
from a5core.rl.sft import SFTConfig, encode_examples, sft_step
from a5core.run import plan
from a5core.stage.training import save_policy
from tests.support.loops import SFT_ROWS, grpo_cfg, run_grpo
from tests.support.resume import checkpointer, straight_killed_resumed

TARGETS = ("q_proj", "v_proj", "up_proj", "down_proj")


def _lora(model, rank=4):
    torch.manual_seed(0)  # PEFT draws A from the global generator: the same adapters on every call
    policy = lora.attach(copy.deepcopy(model), rank, 8.0, TARGETS)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)  # as after some training: B = 0 at the start
    return policy


def test_rank_zero_is_full_fine_tuning_and_a_target_must_exist(tiny):
    model, _ = tiny
    assert lora.attach(model, 0, 8.0, TARGETS) is model and not lora.is_lora(model)
    with pytest.raises(ValueError, match=r"\['qkv'\] name no layer"):
        lora.attach(copy.deepcopy(model), 4, 8.0, ("q_proj", "qkv"))


def test_adapters_start_at_the_loaded_weights_and_only_they_train(tiny):
    model, tok = tiny
    policy = lora.attach(copy.deepcopy(model), 4, 8.0, TARGETS)
    ids = tok("Compute 1 + 1.", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(policy(input_ids=ids).logits, model(input_ids=ids).logits)  # B = 0
    trained = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    opt = make_optimizer(policy, 1e-3)
    assert sum(len(g["params"]) for g in opt.param_groups) == len(trained)


def test_merged_weights_are_the_saved_model_and_give_the_lora_policys_outputs(tiny, tmp_path):
    model, tok = tiny
    policy = _lora(model)
    merged = lora.merged_state_dict(policy)
    assert set(merged) == set(model.state_dict())  # the base model's names
    save_policy(policy, tok, tmp_path / "m", {"stage": "test"})
    assert lora.is_lora(policy)  # saving merged a copy; the policy keeps its adapters
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    for name, t in loaded.state_dict().items():
        assert torch.equal(t, merged[name]), name
    ids = tok("Compute 12 + 30.", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, policy(input_ids=ids).logits, atol=1e-5)


def test_an_sft_step_moves_the_adapters_and_leaves_the_base_weights(tiny):
    model, tok = tiny
    policy = _lora(model)
    base = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    opt = make_optimizer(policy, 1e-2)
    sft_step(
        policy.train(),
        encode_examples(tok, SFT_ROWS[:4]),
        SFTConfig(micro_batch_size=2),
        0,
        torch.device("cpu"),
        compute=Compute(),
    )
    opt.step()
    params = dict(policy.named_parameters())
    assert all(torch.equal(params[n], t) for n, t in base.items())
    assert all(not torch.equal(params[n], t) for n, t in adapters.items())


def test_grpo_with_lora_trains_and_resumes_bit_identically(tiny, tmp_path):
    model, tok = tiny
    cfg = grpo_cfg(n_grpo_steps=3)

    def run(name, kill_at):
        policy = _lora(model)
        run_grpo(policy, tok, tmp_path / name, cfg, ckpt=checkpointer(tmp_path, name), die_at=kill_at)
        return policy

    out = straight_killed_resumed(run, 3)
    straight, resumed = out.straight, out.resumed
    moved = [not torch.equal(p, q) for p, q in zip(straight.parameters(), _lora(model).parameters())]
    assert any(moved)
    assert all(torch.equal(p, q) for p, q in zip(straight.parameters(), resumed.parameters()))


def test_the_plan_counts_adapters_instead_of_full_gradients_and_moments():
    qwen = plan.Arch.of(plan.KNOWN["hf:Qwen/Qwen2.5-Math-1.5B"])
    # per layer at rank 8: q and o 8 x (1536 + 1536), k and v 8 x (1536 + 256), gate and up 8 x (1536 + 8960), down 8 x
    # (8960 + 1536)
    per_layer = 8 * (2 * 3072 + 2 * 1792 + 3 * 10496)
    assert plan.lora_parameters(qwen, 8, lora.DEFAULT_TARGETS) == 28 * per_layer == 9_232_384
    full = plan.training_memory(qwen, "bfloat16", 2, 1324)
    adapted = plan.training_memory(qwen, "bfloat16", 2, 1324, adapters=9_232_384)
    assert adapted["weights"] == full["weights"] and adapted["lora_adapters"] == pytest.approx(9_232_384 * 4 / 1024**3)
    assert adapted["adamw_moments"] == pytest.approx(2 * 9_232_384 * 4 / 1024**3)  # float32 adapters
    assert adapted["gradients"] < full["gradients"] / 50


def test_adapters_beside_bf16_weights_are_float32_and_take_exact_updates(tiny):
    """The full profile's bf16 weights with model.weight_update stochastic_round: PEFT keeps the adapters in float32,
    whose AdamW updates need no rounding scheme; full fine-tuning of float32 weights still refuses one."""
    model, _ = tiny
    policy = lora.attach(copy.deepcopy(model).to(torch.bfloat16), 4, 8.0, TARGETS)
    trained = [p for p in policy.parameters() if p.requires_grad]
    assert trained and all(p.dtype == torch.float32 for p in trained)
    assert type(make_optimizer(policy, 1e-3, update="stochastic_round")) is torch.optim.AdamW
    with pytest.raises(ValueError, match="bfloat16 weights"):
        make_optimizer(copy.deepcopy(model), 1e-3, update="stochastic_round")
