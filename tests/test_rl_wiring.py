"""Every RL option and estimator through the real GRPO update, on against off: `optimizer_step` (the loop's step:
micro-batches, loss table, options, share, clip, optimizer) or `rollout_batch` / `with_kl_in_reward` (the loop's
rollout side). Each test fails when the one line that applies its option is broken (the closing note of issue 44
names the line each one guards). The update is read as the weight change of one SGD step at lr 1 with clipping off,
i.e. the step's gradient itself."""

import copy
import math

import pytest
import torch

from a5core.base.records import GradedSample, RolloutBatch
from a5core.config.sections import ConfigError, from_dict
from a5core.rl.advantages import group_normalize
from a5core.rl.grpo_config import GRPOConfig
from a5core.rl.grpo_update import old_log_probs_for, optimizer_step, rollout_batch, with_kl_in_reward
from a5core.rl.rl_options import kl_penalty

CPU = torch.device("cpu")
N = 4  # rollouts: two questions x a group of two


def cfg(**kw) -> GRPOConfig:
    base = dict(rollout_batch_size=N, group_size=2, train_batch_size=N, gradient_accumulation_steps=2)
    return from_dict(GRPOConfig, {**base, "max_grad_norm": 1e9, **kw}, "grpo")


def batch(tok, advantages=(1.0, -1.0, 0.5, -0.5)) -> RolloutBatch:
    """Four rollouts of 3 to 9 response tokens (seeded ids), two per question, with the given advantages."""
    g = torch.Generator().manual_seed(0)
    questions = ["Q0: what is 2 * 5?", "Q0: what is 2 * 5?", "Q1: what is 3 + 4?", "Q1: what is 3 + 4?"]
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in questions]
    outputs = [torch.randint(5, tok.vocab_size, (3 + 2 * i,), generator=g).tolist() for i in range(N)]
    return RolloutBatch(prompts, outputs, torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor(advantages), 0)


def update(model, c: GRPOConfig, b: RolloutBatch, idx=None) -> tuple[torch.Tensor, dict]:
    """One optimizer step: the step's update direction (minus its gradient, taken as the optimizer gets it, so no
    rounding of the weights blurs it) and the logged row."""
    m = copy.deepcopy(model).train()
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    grads: list[torch.Tensor] = []
    step = opt.step
    opt.step = lambda: (
        grads.extend(torch.zeros_like(p) if p.grad is None else -p.grad.clone() for p in m.parameters()),
        step(),
    )[1]
    row = optimizer_step(m, opt, c, idx or list(range(N)), b, CPU)
    return torch.cat([g.flatten() for g in grads]), row


def current(model, b: RolloutBatch) -> list[torch.Tensor]:
    """The model's own log-probs of the rollouts (what old log-probs are on-policy)."""
    return old_log_probs_for(copy.deepcopy(model).eval(), b, 2, CPU)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float32 summation order: |a - b| <= 1e-5 |b| (norms)."""
    return float((a - b).norm()) <= 1e-5 * float(b.norm())


# ---- mask_truncated: truncated rollouts out of the loss and its count (DAPO) ----


@pytest.mark.parametrize("norm", ["token_mean", "masked_mean", "masked_normalize"])
def test_mask_truncated_is_the_step_without_the_truncated_rollouts(tiny, norm):
    model, tok = tiny
    b = batch(tok)
    b.keep = torch.tensor([1.0, 0.0, 1.0, 1.0])  # rollout 1 was cut at max_tokens
    on, _ = update(model, cfg(mask_truncated=True, length_normalization=norm), b)
    without, _ = update(model, cfg(length_normalization=norm), b, idx=[0, 2, 3])  # DAPO: as if never sampled
    off, _ = update(model, cfg(length_normalization=norm), b)
    assert close(on, without) and not close(on, off)
    b.keep = torch.zeros(N)  # every rollout truncated: no update, and no 0 / 0
    nothing, row = update(model, cfg(mask_truncated=True, length_normalization=norm), b)
    assert torch.equal(nothing, torch.zeros_like(nothing)) and math.isfinite(row["train/loss"])


# ---- KL to the reference: in the loss it moves the weights toward the reference ----


@pytest.mark.parametrize("estimator", ["k2", "k3", "k3+"])
def test_a_kl_only_loss_moves_the_policy_toward_the_reference(tiny, estimator):
    """Advantages all 0: the KL term alone moves the weights, and a small step along that move lowers the KL estimate
    to the reference on the rollouts' tokens (the term multiplied by 0 would leave the weights where they are)."""
    model, tok = tiny
    b = batch(tok, advantages=(0.0, 0.0, 0.0, 0.0))  # no policy-gradient signal at all
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    b.ref_log_probs = current(ref, b)
    off, _ = update(model, cfg(), b)
    on, row = update(model, cfg(kl_coef=1.0, kl_estimator=estimator), b)
    assert torch.equal(off, torch.zeros_like(off)) and on.abs().max() > 0 and row["train/kl"] > 0

    def kl(weights_delta: torch.Tensor) -> float:  # mean k3 (an unbiased KL(pi || ref)) over the response tokens
        m = copy.deepcopy(model)
        with torch.no_grad():
            flat = torch.nn.utils.parameters_to_vector(model.parameters()) + weights_delta
            torch.nn.utils.vector_to_parameters(flat, m.parameters())
        total = count = 0.0
        for lp, ref_lp, p, o in zip(current(m, b), b.ref_log_probs, b.prompt_ids, b.output_ids):
            response = slice(len(p) - 1, len(p) - 1 + len(o))  # rows are padded past the rollout
            total += float(kl_penalty(lp[response], ref_lp[response], "k3").sum())
            count += len(o)
        return total / count

    assert kl(0.02 * on) < kl(torch.zeros_like(on))


def test_k1_is_refused_in_the_loss_and_allowed_in_the_reward():
    with pytest.raises(ConfigError, match="zero expected gradient"):
        cfg(kl_coef=0.1, kl_estimator="k1")
    assert cfg(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True).kl_in_reward
    with pytest.raises(ConfigError, match="kl_in_reward needs kl_coef"):
        cfg(kl_in_reward=True)


def test_kl_in_the_reward_lowers_each_reward_by_beta_times_the_summed_k1(tiny):
    model, tok = tiny
    b, c = batch(tok), cfg(kl_coef=0.5, kl_estimator="k1", kl_in_reward=True)
    own = current(model, b)
    b.ref_log_probs = [lp - 0.1 * (torch.arange(lp.shape[0]) % 3) for lp in own]  # k1 of 0, 0.1, 0.2 by position
    raw = b.raw_rewards.clone()
    b, stats = with_kl_in_reward(b, own, c)
    k1 = [
        float((0.1 * (torch.arange(len(p) - 1, len(p) - 1 + len(o)) % 3)).sum())
        for p, o in zip(b.prompt_ids, b.output_ids)
    ]
    assert b.raw_rewards.tolist() == pytest.approx([r - 0.5 * k for r, k in zip(raw.tolist(), k1)], abs=1e-5)
    assert torch.allclose(b.advantages, group_normalize(b.raw_rewards, 2, c.advantage_eps, True)[0])
    assert stats["rollout/kl"] == pytest.approx(sum(k1) / N, abs=1e-5)
    # and the loss then holds no KL term: the same update as the run without KL, on these advantages
    assert close(update(model, c, b)[0], update(model, cfg(), b)[0])


def test_extreme_log_probs_never_give_nan(tiny):
    """A reference log-prob of -1e4 or +1e4 at masked and unmasked positions: the clamped estimators stay finite."""
    model, tok = tiny
    b = batch(tok)
    b.ref_log_probs = [
        torch.full((len(p) + len(o) - 1,), v) for p, o, v in zip(b.prompt_ids, b.output_ids, (-1e4, 1e4, -95.0, 0.0))
    ]
    b.ref_log_probs[3] = b.ref_log_probs[3][:2]  # short: zero-padded past its width, at masked and unmasked positions
    for estimator in ("k2", "k3", "k3+"):
        delta, row = update(model, cfg(kl_coef=0.1, kl_estimator=estimator), b)
        assert torch.isfinite(delta).all() and math.isfinite(row["train/loss"]) and math.isfinite(row["train/kl"])


# ---- truncated importance sampling: the PG gradient times min(pi_old / pi_rollout, C) ----


def test_tis_scales_the_policy_gradient_by_the_capped_ratio_of_old_to_rollout(tiny):
    model, tok = tiny
    b = batch(tok)
    b.old_log_probs = [lp - 0.1 for lp in current(model, b)]  # ratio e^0.1 to the old policy: inside the clip range
    b.rollout_log_probs = [
        old[len(p) - 1 : len(p) - 1 + len(o)] - math.log(2)
        for old, p, o in zip(b.old_log_probs, b.prompt_ids, b.output_ids)
    ]
    off, _ = update(model, cfg(loss_type="grpo_clip"), b)
    on, row = update(model, cfg(loss_type="grpo_clip", tis_cap=3.0), b)
    capped, _ = update(model, cfg(loss_type="grpo_clip", tis_cap=1.5), b)
    assert close(on, 2 * off) and close(capped, 1.5 * off)  # pi_old / pi_rollout = 2, under and over the cap
    assert row["train/tis_logprob_gap"] == pytest.approx(math.log(2), abs=1e-5)


# ---- clip-higher and dual-clip: which ratios the loss clips ----


def test_clip_higher_lets_a_positive_advantage_ratio_pass_between_the_bounds(tiny):
    model, tok = tiny
    b = batch(tok, advantages=(1.0, 1.0, 1.0, 1.0))
    b.old_log_probs = [lp - math.log(1.25) for lp in current(model, b)]  # ratio 1.25: above 1.2, below 1.28
    _, symmetric = update(model, cfg(loss_type="grpo_clip"), b)
    higher, high = update(model, cfg(loss_type="grpo_clip", cliprange_high=0.28), b)
    assert symmetric["train/clip_fraction"] == pytest.approx(1.0) and high["train/clip_fraction"] == 0.0
    assert higher.abs().max() > 0  # unclipped: the tokens keep their gradient


def test_dual_clip_bounds_the_loss_of_negative_advantages_with_exploded_ratios(tiny):
    model, tok = tiny
    b = batch(tok, advantages=(-1.0, -1.0, -1.0, -1.0))
    b.old_log_probs = [lp - math.log(5.0) for lp in current(model, b)]  # ratio 5 with A < 0: -rho*A = 5 > c = 3
    plain, row = update(model, cfg(loss_type="grpo_clip"), b)
    dual, dual_row = update(model, cfg(loss_type="grpo_clip", clip_ratio_c=3.0), b)
    wide, _ = update(model, cfg(loss_type="grpo_clip", clip_ratio_c=10.0), b)
    assert plain.abs().max() > 0 and torch.equal(dual, torch.zeros_like(dual))  # bounded at -c*A: a constant
    assert close(wide, plain)  # a bound above every ratio changes nothing
    assert row["train/loss"] == pytest.approx(5.0, rel=1e-4) and dual_row["train/loss"] == pytest.approx(3.0, rel=1e-4)


def test_dual_clip_needs_a_clipped_loss():
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        cfg(clip_ratio_c=3.0)
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        cfg(loss_type="grpo_clip", clip_ratio_c=1.0)  # c must exceed 1


# ---- GSPO: the sequence's mean log-ratio, not each token's ----


def test_gspo_uses_the_sequence_ratio(tiny):
    model, tok = tiny
    b = batch(tok)
    own = current(model, b)
    b.old_log_probs = own
    at_one, _ = update(model, cfg(loss_type="gspo"), b)
    assert close(at_one, update(model, cfg(loss_type="grpo_clip"), b)[0])  # every ratio 1: GRPO-Clip's update

    def zero_mean_shift(lp, p, n):  # +-0.15 on alternate response tokens: each sequence's mean log-ratio stays 0
        shift = torch.zeros_like(lp)
        alternating = 0.15 * (1 - 2 * (torch.arange(n) % 2)).float()
        alternating[-1] -= alternating.sum()  # an odd count: the last token takes the rest
        shift[p - 1 : p - 1 + n] = alternating
        return lp + shift

    b.old_log_probs = [zero_mean_shift(lp, len(p), len(o)) for lp, p, o in zip(own, b.prompt_ids, b.output_ids)]
    gspo, _ = update(model, cfg(loss_type="gspo"), b)
    grpo_clip, _ = update(model, cfg(loss_type="grpo_clip"), b)
    assert close(gspo, at_one) and not close(grpo_clip, at_one)  # s_i = 1 however the tokens' ratios differ


def test_gspo_needs_the_per_sequence_mean():
    with pytest.raises(ConfigError, match="gspo"):
        cfg(loss_type="gspo", length_normalization="token_mean")


# ---- the rollout side: overlong penalty, advantage estimators ----


def sample(reward: float, tokens: int, finish: str = "stop") -> GradedSample:
    return GradedSample(
        "q",
        0,
        "Q: 1 + 1?",
        "r",
        "2",
        None,
        "correct",
        1.0,
        reward,
        reward,
        tokens,
        finish,
        "",
        "",
        tuple(range(5, 5 + tokens)),
    )


def test_the_overlong_penalty_changes_the_rewards_the_advantages_see(tiny):
    tok = tiny[1]
    samples = [sample(1.0, 4), sample(1.0, 10), sample(0.0, 6), sample(0.0, 9)]  # max_tokens 10, buffer 4
    off, _ = rollout_batch(tok, samples, cfg(max_tokens=10))
    on, _ = rollout_batch(tok, samples, cfg(max_tokens=10, overlong_buffer=4))
    assert on.raw_rewards.tolist() == pytest.approx([1.0, 0.0, 0.0, -0.75])  # 1 - 1 at 10 tokens; -3/4 at 9
    assert off.advantages.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0])  # equal rewards in each group
    assert on.advantages.tolist() == pytest.approx(group_normalize(on.raw_rewards, 2, 1e-6, True)[0].tolist())


def test_the_advantage_estimators_by_hand(tiny):
    tok = tiny[1]
    samples = [sample(1.0, 2), sample(0.0, 4), sample(1.0, 2), sample(1.0, 2)]
    rloo, _ = rollout_batch(tok, samples, cfg(advantage_estimator="rloo"))
    assert rloo.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])  # r_i - the other's reward
    # REINFORCE++: rewards (1, 0, 1, 1) counted per token (2, 4, 2, 2): mean 0.6, unbiased var 0.24 * 10/9
    pp, _ = rollout_batch(tok, samples, cfg(advantage_estimator="reinforce_pp"))
    sd = math.sqrt(0.24 * 10 / 9 + 1e-8)
    assert pp.advantages.tolist() == pytest.approx([0.4 / sd, -0.6 / sd, 0.4 / sd, 0.4 / sd], rel=1e-5)
    # -baseline: group-centred (0.5, -0.5, 0, 0) per token (2, 4, 2, 2): mean -0.1, var (2*.36 + 4*.16 + 4*.01) / 10
    base, _ = rollout_batch(tok, samples, cfg(advantage_estimator="reinforce_pp_baseline"))
    var = (2 * 0.36 + 4 * 0.16 + 4 * 0.01) / 10 * 10 / 9
    expected = [(a + 0.1) / math.sqrt(var + 1e-8) for a in (0.5, -0.5, 0.0, 0.0)]
    assert base.advantages.tolist() == pytest.approx(expected, rel=1e-5)
    grpo, _ = rollout_batch(tok, samples, cfg())
    assert grpo.advantages.tolist() == pytest.approx(
        group_normalize(torch.tensor([1.0, 0, 1, 1]), 2, 1e-6, True)[0].tolist()
    )


def test_grpo_trains_at_temperature_one_only():
    with pytest.raises(ConfigError, match="temperature 1.0 and top_p 1.0"):
        cfg(temperature=0.7)
    with pytest.raises(ConfigError, match="temperature 1.0 and top_p 1.0"):
        cfg(top_p=0.9)
