"""Every RL option and estimator through the real GRPO update, on against off: `optimizer_step` (the loop's step:
micro-batches, loss table, options, share, clip, optimizer) or `rollout_batch` / `with_kl_in_reward` (the loop's
rollout side). Each test fails when the one line that applies its option is broken (the closing note of issue 44
names the line each one guards). The update is read as the weight change of one SGD step at lr 1 with clipping off,
i.e. the step's gradient itself."""

import copy
import dataclasses
import math

import pytest
import torch

from a5core.base.records import GradedSample, RolloutBatch
from a5core.config.sections import ConfigError, from_dict
from a5core.model.compute import Compute
from a5core.model.logprobs import get_response_log_probs
from a5core.model.tokenization import tokenize_ids
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
    row = optimizer_step(m, opt, c, idx or list(range(N)), b, CPU, compute=Compute())
    return torch.cat([g.flatten() for g in grads]), row


def current(model, b: RolloutBatch) -> list[torch.Tensor]:
    """The model's own log-probs of the rollouts (what old log-probs are on-policy)."""
    return old_log_probs_for(copy.deepcopy(model).eval(), b, 2, CPU, compute=Compute())


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
    assert cfg(kl_coef=0.1, kl_estimator="k1", kl_in_reward=True, use_std_normalization=False).kl_in_reward
    with pytest.raises(ConfigError, match="kl_in_reward needs kl_coef"):
        cfg(kl_in_reward=True)


def test_kl_in_the_reward_lowers_each_reward_by_beta_times_the_summed_k1(tiny):
    model, tok = tiny
    b, c = batch(tok), cfg(kl_coef=0.5, kl_estimator="k1", kl_in_reward=True, use_std_normalization=False)
    own = current(model, b)
    b.ref_log_probs = [lp - 0.1 * (torch.arange(lp.shape[0]) % 3) for lp in own]  # k1 of 0, 0.1, 0.2 by position
    raw = b.raw_rewards.clone()
    b, stats = with_kl_in_reward(b, own, c)
    k1 = [
        float((0.1 * (torch.arange(len(p) - 1, len(p) - 1 + len(o)) % 3)).sum())
        for p, o in zip(b.prompt_ids, b.output_ids)
    ]
    assert b.raw_rewards.tolist() == pytest.approx([r - 0.5 * k for r, k in zip(raw.tolist(), k1)], abs=1e-5)
    assert torch.allclose(b.advantages, group_normalize(b.raw_rewards, 2, c.advantage_eps, False)[0])
    k3 = [  # rollout/kl logs the unbiased k3 of the same log-ratios, whatever the estimator
        float(sum(math.exp(-(0.1 * (t % 3))) - 1 + 0.1 * (t % 3) for t in range(len(p) - 1, len(p) - 1 + len(o))))
        for p, o in zip(b.prompt_ids, b.output_ids)
    ]
    assert stats["rollout/kl"] == pytest.approx(sum(k3) / N, abs=1e-5)
    # and the loss then holds no KL term: the same update as the run without KL, on these advantages
    assert close(update(model, c, b)[0], update(model, cfg(use_std_normalization=False), b)[0])


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


def test_clip_ranges_are_epsilons_between_zero_and_one():
    """A ratio is clipped to 1 +- eps: eps of 1.5 is no clip range (issue 64); null is the loss's own."""
    for field in ("cliprange", "cliprange_high"):
        with pytest.raises(ConfigError, match=rf"grpo.{field}: must be > 0 and < 1, got 1.5 \(or null\)"):
            cfg(loss_type="grpo_clip", **{field: 1.5})
    assert cfg(loss_type="grpo_clip", cliprange=None).clip_bounds == 0.2


def test_grpo_samples_without_min_tokens():
    """Issue 59 item 5: min_tokens holds EOS back at the first tokens, so they are sampled from another distribution
    than the policy whose log-probs the loss and TIS use (as temperature and top_p would be): refused."""
    with pytest.raises(ConfigError, match="min_tokens samples the first tokens with EOS held back"):
        cfg(min_tokens=4)
    assert cfg().min_tokens == 0 and cfg().sampling(0).min_tokens == 0


def test_grpo_trains_at_temperature_one_only():
    with pytest.raises(ConfigError, match="temperature 1.0 and top_p 1.0"):
        cfg(temperature=0.7)
    with pytest.raises(ConfigError, match="temperature 1.0 and top_p 1.0"):
        cfg(top_p=0.9)


# ---- issue 59: KL in the reward that respects beta, REINFORCE++'s token-level returns, the estimators as verl's ----


def all_wrong_group_with_kl(tok, kls=(0.0, 0.04, 0.08, 0.12)) -> tuple[RolloutBatch, list[torch.Tensor]]:
    """One group of four all-wrong rollouts (reward 0) whose summed k1 to the reference are `kls`: the rollout
    policy's log-probs, and reference log-probs lower by kl / length at each response token."""
    g = torch.Generator().manual_seed(1)
    prompt = tok("Q: 2 + 2?", add_special_tokens=False)["input_ids"]
    outputs = [torch.randint(5, tok.vocab_size, (4,), generator=g).tolist() for _ in kls]
    b = RolloutBatch([prompt] * 4, outputs, torch.zeros(4), torch.zeros(4), 0)
    own = [torch.randn(len(prompt) + 4 - 1, generator=g) - 3 for _ in kls]
    b.ref_log_probs = [lp.clone() for lp in own]
    for ref, kl in zip(b.ref_log_probs, kls):
        ref[len(prompt) - 1 :] -= kl / 4
    return b, own


def test_kl_in_the_reward_under_grpos_std_normalization_is_refused_and_beta_scales_it_otherwise(tiny):
    """Issue 59 item 1: with grpo's std division an all-equal group keeps only its KL spread, scaled to +-1 whatever
    beta is ([1.14, 0.38, -0.38, -1.14] at beta 0.001): refused. Without it (and under RLOO) the advantages are
    linear in beta. (REINFORCE++(-baseline) whiten over the whole batch, as published: their scale is the batch's.)"""
    with pytest.raises(ConfigError, match="whatever kl_coef is"):
        cfg(kl_coef=0.001, kl_estimator="k1", kl_in_reward=True)
    tok = tiny[1]
    for estimator in ("grpo", "rloo"):
        got = []
        for beta in (0.001, 0.002):
            c = cfg(kl_coef=beta, kl_estimator="k1", kl_in_reward=True, use_std_normalization=False, group_size=4)
            c = dataclasses.replace(c, advantage_estimator=estimator)
            b, own = all_wrong_group_with_kl(tok)
            got.append(with_kl_in_reward(b, own, c)[0].advantages)
        assert got[0].abs().max() > 0 and torch.allclose(got[1], 2 * got[0], atol=1e-7), estimator  # linear in beta
        if estimator == "grpo":  # -beta * (kl - mean kl): 0.001 * (0.06, 0.02, -0.02, -0.06)
            assert got[0].tolist() == pytest.approx([6e-5, 2e-5, -2e-5, -6e-5], abs=1e-8)


def returns_whitened(rewards: list[list[float]]) -> list[list[float]]:
    """REINFORCE++ by its definition (Hu, 2025, section 3): each token's return-to-go, whitened over every token."""
    returns = [[sum(r[t:]) for t in range(len(r))] for r in rewards]
    flat = [x for r in returns for x in r]
    mean = sum(flat) / len(flat)
    sd = math.sqrt(sum((x - mean) ** 2 for x in flat) / (len(flat) - 1) + 1e-8)
    return [[(x - mean) / sd for x in r] for r in returns]


def test_reinforce_pp_with_kl_in_the_reward_trains_on_each_tokens_whitened_return(tiny):
    """Issue 59 item 2: token-level rewards (-beta * k1 at each token, the task reward at the last), return-to-go,
    whitened over the batch's tokens, as verl's compute_reinforce_plus_plus_outcome_advantage; and the update weighs
    each token by its own advantage (the same update as per-rollout advantages only where they are constant)."""
    model, tok = tiny
    b = batch(tok)
    own = current(model, b)
    shift = [0.1 * (torch.arange(lp.shape[0]) % 3).float() for lp in own]  # k1 of 0, 0.1, 0.2 by position
    b.ref_log_probs = [lp - s for lp, s in zip(own, shift)]
    c = cfg(kl_coef=0.5, kl_estimator="k1", kl_in_reward=True, advantage_estimator="reinforce_pp")
    task = b.raw_rewards.tolist()
    b, _ = with_kl_in_reward(b, own, c)
    rewards = []
    for r, s, p, o in zip(task, shift, b.prompt_ids, b.output_ids):
        token = [-0.5 * float(x) for x in s[len(p) - 1 : len(p) - 1 + len(o)]]
        token[-1] += r
        rewards.append(token)
    want = returns_whitened(rewards)
    for got, expected in zip(b.token_advantages, want):
        assert got.tolist() == pytest.approx(expected, abs=1e-5)
    # the update: -mean over rollouts of the mean over their tokens of A_t * log pi_t (masked_mean), by autograd
    m = copy.deepcopy(model).train()
    t = tokenize_ids(b.prompt_ids, b.output_ids, 0)
    lp = get_response_log_probs(m, t["input_ids"], t["labels"])["log_probs"]  # (N, T)
    adv = torch.zeros_like(lp)  # (N, T)
    for i, (p, a) in enumerate(zip(b.prompt_ids, b.token_advantages)):
        adv[i, len(p) - 1 : len(p) - 1 + a.shape[0]] = a
    mask = t["response_mask"].float()  # (N, T)
    (-((adv * lp * mask).sum(-1) / mask.sum(-1)).mean()).backward()
    by_hand = torch.cat([-p.grad.flatten() for p in m.parameters()])
    token_level, _ = update(model, c, b)
    b.token_advantages = None  # one advantage per rollout instead: another update
    assert close(token_level, by_hand) and not close(update(model, c, b)[0], by_hand)


def test_kl_in_the_reward_uses_the_configured_estimator(tiny):
    """Issue 59 item 5: k2 in the reward is 0.5 * log-ratio^2 per token, not k1."""
    model, tok = tiny
    b, own = all_wrong_group_with_kl(tok, kls=(0.4, 0.8, 1.2, 1.6))  # log-ratio kl / 4 at each of 4 tokens
    raw = b.raw_rewards.clone()
    c = cfg(kl_coef=1.0, kl_estimator="k2", kl_in_reward=True, use_std_normalization=False, group_size=4)
    b, _ = with_kl_in_reward(b, own, c)
    assert (raw - b.raw_rewards).tolist() == pytest.approx([4 * 0.5 * (k / 4) ** 2 for k in (0.4, 0.8, 1.2, 1.6)])


def test_the_estimators_keep_their_gradient_and_log_an_unbiased_kl(tiny):
    """Issue 59 items 4 and 5, through the update with advantages 0 (the KL term alone): k3's +-10 clamp holds its
    value and its gradient there (a token at log-ratio -3, k3 16.1, moves nothing, as one at log-ratio 0); k3+ keeps
    k2's gradient past a log-ratio of 20 (verl's: the straight-through part is unclamped); `train/kl` logs k3's
    unclamped value."""
    model, tok = tiny
    b = batch(tok, advantages=(0.0, 0.0, 0.0, 0.0))
    own = current(model, b)

    def with_ref(shift_at_first: float) -> RolloutBatch:  # the first response token of rollout 0 shifted
        out = copy.deepcopy(b)
        out.ref_log_probs = [lp - 0.05 for lp in own]
        start = len(b.prompt_ids[0]) - 1
        out.ref_log_probs[0][start] = own[0][start] - shift_at_first
        return out

    clamped, row = update(model, cfg(kl_coef=1.0, kl_estimator="k3"), with_ref(-3.0))
    flat, _ = update(model, cfg(kl_coef=1.0, kl_estimator="k3"), with_ref(0.0))
    assert close(clamped, flat) and clamped.abs().max() > 0
    tokens = sum(len(o) for o in b.output_ids)
    k3 = (math.exp(3.0) - 1 - 3.0 + (tokens - 1) * (math.exp(-0.05) - 1 + 0.05)) / tokens
    assert row["train/kl"] == pytest.approx(k3, rel=1e-4)  # 16.09 at that token, not the clamp's 10
    far, _ = update(model, cfg(kl_coef=1.0, kl_estimator="k3+"), with_ref(25.0))
    k2, _ = update(model, cfg(kl_coef=1.0, kl_estimator="k2"), with_ref(25.0))
    near, _ = update(model, cfg(kl_coef=1.0, kl_estimator="k3+"), with_ref(0.05))
    assert close(far, k2) and not close(far, near)  # the log-ratio of 25 pulls 25x harder, not 0x


def test_dual_clip_leaves_positive_advantages_alone(tiny):
    """Issue 59 item 4: dual-clip bounds the loss of A < 0 only. On-policy (every ratio 1) it binds nowhere, so the
    update equals plain GRPO-Clip's for mixed advantages; applied to A > 0 too it would zero their gradient."""
    model, tok = tiny
    b = batch(tok)
    b.old_log_probs = current(model, b)
    plain, _ = update(model, cfg(loss_type="grpo_clip"), b)
    dual, row = update(model, cfg(loss_type="grpo_clip", clip_ratio_c=3.0), b)
    assert close(dual, plain) and row["train/clip_fraction"] == 0.0


def test_gspo_clips_the_sequence_ratio_at_the_papers_range(tiny):
    """Issue 59 items 4 and 5: GSPO's default range is its paper's (3e-4 below, 4e-4 above). A sequence ratio of
    1.001 clips the rollouts with A > 0 (no gradient: the update of the batch with their advantages at 0) and not
    those with A < 0; at the handout's 0.2 nothing clips."""
    model, tok = tiny
    assert cfg(loss_type="gspo").clip_bounds == (3e-4, 4e-4) and cfg(loss_type="grpo_clip").clip_bounds == 0.2
    assert cfg(loss_type="gspo", cliprange=0.2).clip_bounds == 0.2
    b = batch(tok)
    b.old_log_probs = [lp - math.log(1.001) for lp in current(model, b)]
    clipped, row = update(model, cfg(loss_type="gspo"), b)
    positive_off = copy.deepcopy(b)
    positive_off.advantages = torch.tensor([0.0, -1.0, 0.0, -0.5])
    assert close(clipped, update(model, cfg(loss_type="gspo"), positive_off)[0])
    assert row["train/clip_fraction"] == pytest.approx((3 + 7) / (3 + 5 + 7 + 9))  # rollouts 0 and 2's tokens
    wide, wide_row = update(model, cfg(loss_type="gspo", cliprange=0.2), b)
    assert wide_row["train/clip_fraction"] == 0.0 and not close(wide, clipped)
    inside = copy.deepcopy(b)  # 2e-4 at every token: a mean of 2e-4 is inside the range, a sum over 3+ tokens is not
    inside.old_log_probs = [lp - 2e-4 for lp in current(model, b)]
    assert update(model, cfg(loss_type="gspo"), inside)[1]["train/clip_fraction"] == 0.0


def test_gspo_takes_the_mean_log_ratio_before_any_clamp(tiny):
    """Issue 59 item 4: one token's log-ratio of 30 in a 9-token response is a mean of 30 / 9; GSPO's gradient depends
    on that mean only, so it equals the update of a uniform 30 / 9 at every token (clamping the token at 10 first
    would make the mean 10 / 9). Negative advantages: s = e^3.3 is unclipped from above for A < 0."""
    model, tok = tiny
    b = batch(tok, advantages=(-1.0, -1.0, -1.0, -1.0))
    own = current(model, b)
    spiked, uniform = copy.deepcopy(b), copy.deepcopy(b)
    spiked.old_log_probs, uniform.old_log_probs = [lp.clone() for lp in own], [lp.clone() for lp in own]
    for i, (p, o) in enumerate(zip(b.prompt_ids, b.output_ids)):
        spiked.old_log_probs[i][len(p) - 1] -= 30.0
        uniform.old_log_probs[i][len(p) - 1 : len(p) - 1 + len(o)] -= 30.0 / len(o)
    got, _ = update(model, cfg(loss_type="gspo"), spiked)
    assert close(got, update(model, cfg(loss_type="gspo"), uniform)[0]) and got.abs().max() > 0


def test_kl_and_entropy_terms_are_weighted_by_tis_as_the_policy_gradient_is(tiny):
    """Issue 59 item 5: under TIS (required with max_staleness 1) the KL and entropy terms are estimated on the
    engine's samples too, so they carry the same capped weight: pi_old / pi_rollout = 2 doubles the KL-only update."""
    model, tok = tiny
    b = batch(tok, advantages=(0.0, 0.0, 0.0, 0.0))
    b.old_log_probs = current(model, b)
    b.ref_log_probs = [lp - 0.05 for lp in b.old_log_probs]
    b.rollout_log_probs = [
        old[len(p) - 1 : len(p) - 1 + len(o)] - math.log(2)
        for old, p, o in zip(b.old_log_probs, b.prompt_ids, b.output_ids)
    ]
    for term in ({"kl_coef": 1.0, "kl_estimator": "k2"}, {"entropy_coef": 0.1}):
        off, _ = update(model, cfg(loss_type="grpo_clip", **term), b)
        on, _ = update(model, cfg(loss_type="grpo_clip", tis_cap=3.0, **term), b)
        assert off.abs().max() > 0 and close(on, 2 * off), term
