"""How AdamW writes updates into bf16 weights (`model.weight_update`) and what the plan says each choice costs."""

from __future__ import annotations

import pytest
import torch

from a5core.config.sections import ConfigError, ModelConfig, from_dict
from a5core.model.optim import KahanAdamW, make_optimizer

LR, BETAS = 1e-5, (0.9, 0.95)


def _train(weights: torch.Tensor, grads: list[torch.Tensor], update: str, lr: float = LR) -> tuple:
    """(final weights, optimizer) after one AdamW step per gradient in `grads`, from `weights`."""
    holder = _holding(weights.clone())
    param = holder.weight
    opt = make_optimizer(holder, lr, 0.0, BETAS, update=update)
    for grad in grads:
        param.grad = grad.to(param.dtype)
        opt.step()
    return param.detach(), opt


def _holding(tensor: torch.Tensor) -> torch.nn.Module:
    """A module whose one parameter is `tensor` (make_optimizer takes a model)."""
    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(tensor)
    return holder


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """The bf16 spacing at |x| (the gap to the next bf16 away from zero)."""
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), torch.frexp(x.float())[1] - 8)


def test_nearest_rounding_drops_small_updates_of_bf16_weights():
    # An RMSNorm weight of 1.0 at lr 1e-5: each step (~1e-5) is below half a bf16 ulp (2^-9), so it never moves.
    norm = torch.ones(256, dtype=torch.bfloat16)
    grads = [torch.ones(256)] * 20
    moved, _ = _train(norm, grads, "nearest")
    assert torch.equal(moved, norm)
    exact, _ = _train(norm.float(), grads, "nearest")  # float32 weights take the same updates
    assert torch.allclose(exact, torch.full((256,), 1 - 20 * LR), atol=1e-7)


def test_kahan_follows_float32_adamw_on_bf16_weights():
    torch.manual_seed(0)
    start = (torch.randn(64, 64) * 0.02).to(torch.bfloat16)
    grads = [torch.randn(64, 64) for _ in range(30)]
    exact, _ = _train(start.float(), grads, "nearest", lr=1e-4)
    kahan, opt = _train(start, grads, "kahan", lr=1e-4)
    nearest, _ = _train(start, grads, "nearest", lr=1e-4)
    assert isinstance(opt, KahanAdamW)
    assert kahan.dtype == torch.bfloat16
    update = exact - start.float()
    # Each bf16 weight is float32 AdamW's rounded (within half a bf16 ulp, the best a bf16 weight can be), up to 1% of
    # the largest update for the bf16 rounding of the moments; weight + compensation is float32 AdamW's weight to
    # 0.5% of the update. Measured: 5.4% (weights) and 0.3% (with compensation) of |update|, round-to-nearest 51%.
    assert bool(((kahan.float() - exact).abs() <= _ulp(exact) / 2 + 0.01 * update.abs().max()).all())
    assert float((kahan.float() - exact).norm() / update.norm()) < 0.1
    held = kahan.float() + opt.state[opt.param_groups[0]["params"][0]]["compensation"].float()
    assert float((held - exact).norm() / update.norm()) < 5e-3
    assert float((nearest.float() - exact).norm() / update.norm()) > 0.3  # round-to-nearest loses much of it


def test_kahan_moves_an_rmsnorm_weight_after_enough_steps():
    # 1.0 - 400 x 1e-5 = 0.996 is nearer 0.99609375 (1 - 2^-8) than 1.0: the compensation has carried the steps.
    moved, _ = _train(torch.ones(8, dtype=torch.bfloat16), [torch.ones(8)] * 400, "kahan")
    assert torch.equal(moved, torch.full((8,), 1 - 2**-8, dtype=torch.bfloat16))


def test_stochastic_rounding_keeps_the_update_in_expectation():
    torch.manual_seed(0)
    n, steps = 65536, 10
    moved, _ = _train(torch.ones(n, dtype=torch.bfloat16), [torch.ones(n)] * steps, "stochastic_round")
    assert moved.dtype == torch.bfloat16
    # float32 AdamW with a constant gradient moves every weight by lr per step: 1.0 -> 1 - 1e-4. Stochastic
    # rounding moves a few weights by a whole ulp (2^-8 below 1.0) with the probability that makes the mean right;
    # the mean's standard error here is ~2.4e-6, so 10% of the update is over 4 standard errors.
    shift = 1.0 - float(moved.float().mean())
    assert shift == pytest.approx(steps * LR, rel=0.1)
    assert 0 < float((moved != 1).float().mean()) < 0.1  # a few weights moved, by a whole ulp each


def test_compensated_updates_are_for_bf16_weights_only():
    with pytest.raises(ValueError, match="bfloat16 weights"):
        make_optimizer(_holding(torch.ones(4)), LR, update="kahan")
    with pytest.raises(ValueError, match="bfloat16 weights"):
        make_optimizer(_holding(torch.ones(4)), LR, update="stochastic_round")


def test_weight_update_setting_is_checked():
    base = {"source": "random:tiny", "dtype": "bfloat16"}
    assert from_dict(ModelConfig, {**base, "weight_update": "kahan"}).weight_update == "kahan"
    with pytest.raises(ConfigError, match="weight_update"):
        from_dict(ModelConfig, {**base, "weight_update": "fp8"})
    with pytest.raises(ConfigError, match="weight_update 'kahan' is for bfloat16 weights"):
        from_dict(ModelConfig, {**base, "dtype": "float32", "weight_update": "kahan"})


def test_plan_states_what_each_precision_costs_per_gpu():
    from a5core.config.sections import GenerationConfig
    from a5core.run import plan

    qwen = plan.Arch.of(plan.KNOWN["hf:Qwen/Qwen2.5-Math-1.5B"])
    per_param = {name: gb * plan.GB / qwen.parameters for name, gb in plan.precision_costs(qwen).items()}
    assert per_param == pytest.approx(
        {
            "float32 weights + bf16 autocast": 16,  # float32 weights, gradients and two moments
            "bfloat16 weights, nearest": 8,
            "bfloat16 weights, stochastic_round": 8,  # torchao keeps bf16 moments too: no extra state
            "bfloat16 weights, kahan": 10,  # + a bf16 compensation buffer
        }
    )
    gen = GenerationConfig(backend="vllm", layout="one_gpu", gpu_memory_utilization=0.3)
    plain, kahan = (plan.memory_plan(qwen, "bfloat16", gen, 2, 1324, 80, update) for update in ("nearest", "kahan"))
    buffer = qwen.parameters * 2 / plan.GB
    for before, after in zip(plain, kahan):  # resident while generating and while training
        assert after.total == pytest.approx(before.total + buffer)
        assert after.items["kahan_compensation"] == pytest.approx(buffer)


@pytest.mark.parametrize("update", ["kahan", "stochastic_round"])
def test_a_resumed_run_continues_exactly(tmp_path, update):
    """Checkpointer's save/restore (weights_only load) keeps the optimizer's state, compensation and lr included."""
    from a5core.model.optim import make_schedule
    from a5core.run.checkpoint import Checkpointer

    torch.manual_seed(0)
    start = (torch.randn(2048) * 0.02).to(torch.bfloat16)
    grads = [torch.randn(2048) for _ in range(6)]

    def steps(holder, opt, sched, todo):
        for grad in todo:
            holder.weight.grad = grad.to(torch.bfloat16)
            opt.step()
            sched.step()

    torch.manual_seed(1)
    whole = _holding(start.clone())
    opt = make_optimizer(whole, 1e-4, 0.0, BETAS, update=update)
    steps(whole, opt, make_schedule(opt, 6, 2, "cosine"), grads)
    torch.manual_seed(1)
    first = _holding(start.clone())
    opt = make_optimizer(first, 1e-4, 0.0, BETAS, update=update)
    sched = make_schedule(opt, 6, 2, "cosine")
    steps(first, opt, sched, grads[:3])
    ckpt = Checkpointer(tmp_path, "fp", every=1)
    ckpt.save_training(first, opt, 3, [], sched)
    resumed = _holding(torch.zeros_like(start))
    opt = make_optimizer(resumed, 1e-4, 0.0, BETAS, update=update)
    sched = make_schedule(opt, 6, 2, "cosine")
    assert ckpt.restore_training(resumed, opt, sched)["step"] == 3
    steps(resumed, opt, sched, grads[3:])
    assert torch.equal(resumed.weight, whole.weight)
    assert not torch.equal(whole.weight, start)


def test_the_sft_loop_trains_bf16_weights_with_the_stage_update(tiny, tmp_path, monkeypatch):
    """What a stage does: training_start resolves model.weight_update into its Compute record; the loop's optimizer
    follows it."""
    import copy

    from a5core.config.sections import ModelConfig
    from a5core.model import optim
    from a5core.model.compute import Compute
    from a5core.rl.sft import SFTConfig
    from tests.support.loops import run_sft

    compute = Compute.of(ModelConfig(dtype="bfloat16", weight_update="stochastic_round"), "cpu", quiet=True)
    built = []
    real = optim.make_optimizer
    monkeypatch.setattr("a5core.rl.sft.make_optimizer", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    model = copy.deepcopy(tiny[0]).to(torch.bfloat16)
    start = [p.detach().clone() for p in model.parameters()]
    rows = [{"unique_id": str(i), "prompt": f"{i} + 1 =", "response": f" {i + 1}</answer>"} for i in range(4)]
    cfg = SFTConfig(batch_size=2, micro_batch_size=2, eval_every=0, lr=1e-5, epochs=1)
    _, history = run_sft(model, tiny[1], tmp_path, cfg, rows=rows, compute=compute)
    assert type(built[0]).__module__.startswith("torchao")
    lrs = [r["train/lr"] for r in history.rows["train"]]
    assert all(type(lr) is float for lr in lrs) and lrs[0] == pytest.approx(1e-5)  # torchao's own lr is a tensor
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), start))
