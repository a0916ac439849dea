"""Each RL option reaches the update (issue 44, item 1): one optimizer step through the real `optimizer_step` (and
`rollout_batch` for the reward), option on against off, on the tiny model with plain SGD (lr 1, no clipping), so the
weights move by exactly the loss's gradient. Each test fails when the one line that applies its option is broken:
the truncation weight not passed, the KL term multiplied by 0, TIS from the current log-probs or never applied, the
overlong penalty left out of the reward, `clip_bounds` replaced by the symmetric `cliprange`."""

import copy
import math

import pytest
import torch

from a5core.base.records import GradedSample, RolloutBatch
from a5core.rl.grpo import GRPOConfig
from a5core.rl.grpo_update import old_log_probs_for, optimizer_step, rollout_batch
from a5core.rl.rl_options import kl_penalty

N, OUT = 4, 6  # rollouts (two groups of 2), response tokens each


def _cfg(**kw) -> GRPOConfig:
    base = dict(rollout_batch_size=N, group_size=2, train_batch_size=N, gradient_accumulation_steps=2, max_tokens=OUT)
    return GRPOConfig(**{**base, "max_grad_norm": 1e9, **kw})


def _rollouts(tok, advantages=(1.0, -1.0, 0.5, -0.5)) -> RolloutBatch:
    gen = torch.Generator().manual_seed(0)
    prompt = tok("What is 12 + 30?", add_special_tokens=False)["input_ids"]
    outputs = [torch.randint(3, len(tok) - 1, (OUT,), generator=gen).tolist() for _ in range(N)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    adv = torch.tensor(advantages)  # (N,)
    return RolloutBatch([list(prompt)] * N, outputs, adv.clone(), adv, pad)


def _perturbed(model, scale: float, seed: int):
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return other


def _lps(model, rb: RolloutBatch) -> list[torch.Tensor]:
    return old_log_probs_for(model, rb, N, "cpu")  # per rollout (T,): log-probs at the label positions


def _step(model, cfg: GRPOConfig, rb: RolloutBatch, lr: float = 1.0) -> tuple[torch.Tensor, dict]:
    """(the weights' change, the step's row) of one SGD step of a copy of `model`."""
    policy = copy.deepcopy(model).train()
    before = torch.cat([p.detach().flatten().clone() for p in policy.parameters()])  # (P,)
    row = optimizer_step(policy, torch.optim.SGD(policy.parameters(), lr=lr), cfg, list(range(N)), rb, "cpu")
    after = torch.cat([p.detach().flatten() for p in policy.parameters()])  # (P,)
    return after - before, row


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b|: the weights' changes are differences of float32 weights, exact to about 1e-7 each."""
    return float((a - b).norm() / b.norm())


def test_mask_truncated_gives_truncated_rollouts_no_gradient(tiny):
    model, tok = tiny
    rb, on = _rollouts(tok), _cfg(mask_truncated=True)
    free, _ = _step(model, _cfg(), rb)
    assert free.abs().max() > 1e-6
    rb.keep = torch.ones(N)  # none truncated: the option changes nothing
    assert _relative(_step(model, on, rb)[0], free) < 1e-3
    rb.keep = torch.zeros(N)  # every rollout cut at max_tokens: nothing to learn from
    assert _step(model, on, rb)[0].abs().max() == 0


def test_a_kl_only_loss_moves_the_policy_toward_the_reference(tiny):
    model, tok = tiny
    rb = _rollouts(tok, advantages=(0.0,) * N)  # no policy-gradient signal: only the KL term can move the weights
    rb.ref_log_probs = _lps(_perturbed(model, 0.05, seed=1), rb)
    assert _step(model, _cfg(), rb)[0].abs().max() == 0
    cfg = _cfg(kl_coef=0.5)
    delta, row = _step(model, cfg, rb, lr=0.05)
    assert delta.abs().max() > 1e-6 and row["train/kl"] > 0

    def kl(policy) -> float:
        lp = torch.stack(_lps(policy, rb))  # (N, T)
        mask = torch.zeros_like(lp)
        start = len(rb.prompt_ids[0]) - 1
        mask[:, start : start + OUT] = 1
        return float((kl_penalty(lp, torch.stack(rb.ref_log_probs), cfg.kl_estimator) * mask).sum() / mask.sum())

    stepped = copy.deepcopy(model)
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(
            torch.nn.utils.parameters_to_vector(model.parameters()) + delta, stepped.parameters()
        )
    assert kl(stepped) < kl(model)  # toward the reference


@pytest.mark.parametrize("ratio,cap,weight", [(2.0, 3.0, 2.0), (4.0, 3.0, 3.0), (1.0, 3.0, 1.0)])
def test_tis_scales_the_policy_gradient_by_the_capped_ratio_of_old_to_rollout(tiny, ratio, cap, weight):
    """Off-policy (grpo_clip, old log-probs from another policy than the current one): the engine's log-probs are the
    old ones minus log(ratio), so every token's weight is min(ratio, cap) and the step is that multiple of the step
    without TIS. A weight computed from the current log-probs would differ token by token."""
    model, tok = tiny
    rb = _rollouts(tok)
    rb.old_log_probs = _lps(_perturbed(model, 0.05, seed=2), rb)  # pi_old != pi_current
    start = len(rb.prompt_ids[0]) - 1
    rb.rollout_log_probs = [old[start : start + OUT] - math.log(ratio) for old in rb.old_log_probs]  # (OUT,) each
    off, _ = _step(model, _cfg(loss_type="grpo_clip"), rb)
    on, row = _step(model, _cfg(loss_type="grpo_clip", tis_cap=cap), rb)
    assert off.abs().max() > 1e-6
    assert _relative(on, weight * off) < 1e-3
    assert row["train/tis_logprob_gap"] == pytest.approx(math.log(ratio), abs=1e-5)


def _samples(tok, lengths: list[int]) -> list[GradedSample]:
    fields = dict(unique_id="q", prompt="What is 12 + 30?", response="x", ground_truth="42", extracted="42")
    fields |= dict(status="correct", format_reward=1.0, answer_reward=1.0, reward=1.0, subject="a", level="1")
    ids = tok(" 42", add_special_tokens=False)["input_ids"]
    return [
        GradedSample(**fields, sample_index=i, output_tokens=n, finish_reason="stop", token_ids=tuple(ids * n)[:n])
        for i, n in enumerate(lengths)
    ]


def test_the_overlong_penalty_changes_the_advantages(tiny):
    _, tok = tiny
    samples = _samples(tok, [2, 6, 3, 5])  # every reward 1: without the penalty, no group has a signal
    plain, _ = rollout_batch(tok, samples, _cfg())
    assert plain.advantages.abs().max() == 0
    penalized, _ = rollout_batch(tok, samples, _cfg(overlong_buffer=4, overlong_penalty=1.0))
    # max 6, buffer 4: lengths 2, 6, 3, 5 pay 0, 1, 0.25, 0.75; each group's longer rollout gets the lower advantage
    assert penalized.raw_rewards.tolist() == pytest.approx([1.0, 0.0, 0.75, 0.25])
    assert (
        penalized.advantages[0] > 0 > penalized.advantages[1] and penalized.advantages[2] > 0 > penalized.advantages[3]
    )


def test_clip_higher_leaves_a_ratio_between_the_bounds_unclipped(tiny):
    """Every token's ratio is 1.25 with positive advantages: the handout's symmetric 0.2 clips it (no gradient), and
    clip-higher's 0.28 does not."""
    model, tok = tiny
    rb = _rollouts(tok, advantages=(1.0,) * N)
    rb.old_log_probs = [lp - math.log(1.25) for lp in _lps(model, rb)]
    symmetric, row = _step(model, _cfg(loss_type="grpo_clip"), rb)
    assert row["train/clip_fraction"] == pytest.approx(1.0) and symmetric.abs().max() == 0
    higher, row = _step(model, _cfg(loss_type="grpo_clip", cliprange_high=0.28), rb)
    assert row["train/clip_fraction"] == 0 and higher.abs().max() > 1e-6
