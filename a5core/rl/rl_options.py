"""The RL options beyond the handout's GRPO that TRL, verl, OpenRLHF and oat offer; each off by default.

Every option is one field of `RLOptions` (which `GRPOConfig` extends) and one small pure function here:
- `cliprange_high`: clip-higher, an asymmetric GRPO-Clip range [1 - eps_low, 1 + eps_high] (DAPO; Yu et al., 2025).
- `mask_truncated`: rollouts cut at max_tokens get zero loss weight (DAPO's overlong filtering).
- `overlong_buffer` / `overlong_penalty`: DAPO's soft overlong punishment, a reward penalty ramping linearly over the
  last `overlong_buffer` tokens before max_tokens.
- `entropy_coef`: entropy bonus, loss -= coef * H(token), H from the training forward pass itself.
- `kl_coef` / `kl_estimator` / `kl_in_reward`: beta * KL to the frozen start policy, with Schulman's estimators
  (http://joschu.net/blog/kl-approx.html; `KL_ESTIMATORS`, whose docstrings state each one's expected gradient in
  the loss), either as a loss term per token or (`kl_in_reward`, verl's `use_kl_in_reward`) as a token-level reward
  penalty: beta * the estimator's value at each response token under the rollout policy, before the advantages
  (a5core/rl/grpo_update.py: with_kl_in_reward). The reference's log-probs are computed once per rollout batch with
  no graph, exactly like the old log-probs.
- `clip_ratio_c`: dual-clip PPO (Ye et al., 2020, arXiv:1912.09729; verl's `clip_ratio_c`): for a negative
  advantage the clipped surrogate is also bounded by -c * A, so a token whose ratio exploded cannot dominate.
- `tis_cap`: truncated importance sampling against the rollout engine's own log-probs (Yao et al., 2025, "Your
  efficient RL framework secretly brings you off-policy RL training"; TRL's `vllm_importance_sampling_cap`, verl's
  `rollout_is`): the engine (vLLM kernels, bf16) and the trainer disagree slightly on pi, so the PG loss of each
  token is weighted by min(pi_train / pi_rollout, C); so are the KL and entropy terms in the loss, estimated on the
  same samples (under max_staleness 1 the previous weights'), with the same per-token approximation.
- `dynamic_sampling` / `max_refill_rounds`: DAPO's dynamic sampling. A group whose rewards are all equal has zero
  advantage everywhere, so it only dilutes the batch: such groups are dropped and fresh questions are generated,
  up to `max_refill_rounds` extra rounds, until the step has `questions_per_step` groups with mixed rewards. At the
  limit the step is filled with dropped groups (zero advantage, the handout's behaviour for them) and the number
  filled is logged, so the batch keeps its size and every batch-size rule holds.

Shapes: B = micro-batch, T = response positions (the labels' width).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from dataclasses import dataclass
from typing import Annotated, Callable, Literal

import torch
from torch import Tensor

from a5core.base.seeds import derive_seed
from a5core.base.typed import ClipEpsilon
from a5core.config.sections import Bound, NonNegative, NonNegativeFloat, Section
from a5core.rl.losses import CLIPPED_LOSSES, DEFAULT_CLIPRANGE

KLEstimator = Literal["k1", "k2", "k3", "k3+"]
LOG_RATIO_BOUND = 20.0  # |log pi - log ref| clamped before exp (verl's low_var_kl); k3 itself to +-10
K3_BOUND = 10.0


@dataclass(frozen=True)
class RLOptions(Section):
    """The options' params fields; the defaults are the handout's GRPO (every option off)."""

    cliprange_high: ClipEpsilon | None = None  # clip-higher eps_high (DAPO: 0.28); None: cliprange, or the loss's own
    mask_truncated: bool = False  # zero the loss of rollouts truncated at max_tokens (DAPO overlong filtering)
    overlong_buffer: NonNegative = 0  # tokens before max_tokens where DAPO's soft length penalty ramps (0 = off)
    overlong_penalty: NonNegativeFloat = 1.0  # that penalty at max_tokens, in reward units
    entropy_coef: NonNegativeFloat = 0.0  # entropy bonus coefficient: loss -= coef * token entropy (0 = off)
    kl_coef: NonNegativeFloat = 0.0  # beta of the KL to the frozen start policy (0 = off, no reference)
    kl_estimator: KLEstimator = (
        "k3+"  # KL estimator: k2, k3 (in a loss: grad of KL(ref||pi)), k3+ (k3's value, k2's grad); k1 in the reward
    )
    kl_in_reward: bool = (
        False  # KL as a token-level reward penalty (beta * kl_estimator's value) instead of a loss term
    )
    clip_ratio_c: Annotated[float, Bound(lo=1, lo_open=True)] | None = None  # dual-clip bound for A < 0 (verl: 3)
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal and refill the step (DAPO)
    max_refill_rounds: NonNegative = 3  # extra generation rounds per step for dynamic sampling; then fill
    tis_cap: NonNegativeFloat = 0.0  # C of truncated importance sampling vs the engine's log-probs (0 = off; 2 typ.)

    # RLOptions is only ever a base of GRPOConfig: `max_tokens`, `cliprange`, `loss_type`, `seed`... are its fields
    def option_problems(self) -> list[str]:
        rules = [
            (
                self.overlong_buffer <= self.max_tokens,
                f"overlong_buffer ({self.overlong_buffer}) must be <= max_tokens ({self.max_tokens})",
            ),
            (
                self.cliprange_high is None or self.loss_type in CLIPPED_LOSSES,
                f"cliprange_high needs a clipped loss ({', '.join(sorted(CLIPPED_LOSSES))}), not {self.loss_type!r}",
            ),
            (
                self.tis_cap == 0 or self.tis_cap >= 1,
                f"tis_cap must be 0 (off) or >= 1 (a cap below 1 down-weights on-policy tokens), got {self.tis_cap}",
            ),
            (
                not self.kl_coef or self.kl_in_reward or self.kl_estimator != "k1",
                "kl_estimator k1 in the loss has zero expected gradient (E_pi[grad log pi] = 0): use k2 or k3+, or "
                "kl_in_reward: true (k1 as a reward penalty)",
            ),
            (not self.kl_in_reward or self.kl_coef > 0, "kl_in_reward needs kl_coef > 0 (the penalty's beta)"),
            (
                not (self.kl_in_reward and self.advantage_estimator == "grpo" and self.use_std_normalization),
                "kl_in_reward under grpo's std normalization: a group whose task rewards are all equal keeps only its "
                "KL spread, which dividing by its std scales to +-1 whatever kl_coef is; set use_std_normalization: "
                "false, or advantage_estimator rloo",
            ),
            (
                self.clip_ratio_c is None or self.loss_type in CLIPPED_LOSSES,
                f"clip_ratio_c (dual-clip) needs a clipped loss ({', '.join(sorted(CLIPPED_LOSSES))}), not "
                f"{self.loss_type!r}",
            ),
        ]
        return [msg for ok, msg in rules if not ok]

    @property
    def clip_bounds(self) -> float | tuple:
        """What the loss table receives as `cliprange`: the float of the handout, or (eps_low, eps_high), or with
        dual-clip (eps_low, eps_high, c). `cliprange` None is the loss's own (DEFAULT_CLIPRANGE: GRPO-Clip's 0.2,
        GSPO's paper's 3e-4 below and 4e-4 above); `cliprange_high` None is the low bound's counterpart."""
        low, default_high = DEFAULT_CLIPRANGE.get(self.loss_type, (0.2, 0.2))
        if self.cliprange is not None:
            low = default_high = self.cliprange
        high = default_high if self.cliprange_high is None else self.cliprange_high
        if low == high and self.clip_ratio_c is None:
            return low
        return (low, high) if self.clip_ratio_c is None else (low, high, self.clip_ratio_c)


# ---- KL to a reference (Schulman, "Approximating KL Divergence", 2020); samples come from the policy ----


# With samples from pi, E[grad k] in the loss is: k1: 0 (E_pi[grad log pi] = 0; refused in the loss, a reward penalty
# only); k2: grad KL(pi || ref); k3: grad KL(ref || pi) (the other direction: DeepSeekMath's and TRL's convention);
# k3+: grad KL(pi || ref), k2's, with k3's value (verl's straight-through "k3+"). As verl's `kl_penalty` (checked
# against verl/trainer/ppo/core_algos.py): only k3 is clamped, its log-ratio to +-LOG_RATIO_BOUND before exp and its
# value to +-K3_BOUND, so no finite log-prob gives inf or NaN (a zero-padded reference log-prob at a masked position
# included); k1 and k2 are finite for finite input and keep their gradient at any log-ratio (k3+'s k2 part too).


def _k1(log_ratio: Tensor) -> Tensor:
    """k1 = log pi - log ref: unbiased value, high variance, can be negative; zero expected gradient in a loss."""
    return log_ratio  # (B, T)


def _k2(log_ratio: Tensor) -> Tensor:
    """k2 = (log pi - log ref)^2 / 2: biased value, low variance; expected gradient grad KL(pi || ref)."""
    return 0.5 * log_ratio**2  # (B, T)


def _k3_unclamped(log_ratio: Tensor) -> Tensor:
    """ref/pi - 1 - log(ref/pi), the log-ratio clamped to +-LOG_RATIO_BOUND only (finite)."""
    lr = log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (B, T)
    return torch.exp(-lr) - 1.0 + lr  # (B, T)


def _k3(log_ratio: Tensor) -> Tensor:
    """k3 = ref/pi - 1 - log(ref/pi): unbiased value of KL(pi || ref), non-negative, low variance (Shao et al., 2024);
    its expected gradient is grad KL(ref || pi). Clamped to [-10, 10] (verl's low_var_kl)."""
    return _k3_unclamped(log_ratio).clamp(-K3_BOUND, K3_BOUND)  # (B, T)


def _k3_plus(log_ratio: Tensor) -> Tensor:
    """k3's value with k2's gradient (straight-through, verl's "k3+"): logs KL(pi || ref) as k3 does and pulls
    toward the reference along grad KL(pi || ref), what `kl_coef` promises (the unclamped log-ratio's gradient)."""
    k2 = _k2(log_ratio)  # (B, T)
    return k2 - k2.detach() + _k3(log_ratio).detach()  # (B, T)


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3, "k3+": _k3_plus}


def kl_penalty(policy_log_probs: Tensor, ref_log_probs: Tensor, estimator: str) -> Tensor:
    """Per-token KL estimate (B, T); the gradient flows through the policy's log-probs only."""
    return KL_ESTIMATORS[estimator](policy_log_probs - ref_log_probs.detach())  # (B, T)


def kl_logged(policy_log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """What `train/kl` and `rollout/kl` log per token, whatever the estimator: k3's value without its +-10 clamp, an
    unbiased estimate of KL(pi || ref) (the clamp would bias it low), no gradient (B, T)."""
    return _k3_unclamped((policy_log_probs - ref_log_probs).detach())  # (B, T)


def kl_reward_tokens(
    rollout_log_probs: list[Tensor],
    ref_log_probs: list[Tensor],
    prompt_lengths: list[int],
    output_lengths: list[int],
    estimator: str,
) -> list[Tensor]:
    """KL in the reward (verl's `apply_kl_penalty`): each rollout's per-token KL estimate (`estimator`'s value, no
    gradient) under the rollout policy, over its response tokens, (O_i,) each; beta times it is the token-level
    penalty. Rows are log-probs of label positions (padded past the rollout); the response is labels p - 1 ..
    p + o - 2."""
    out = []
    for lp, ref, p, o in zip(rollout_log_probs, ref_log_probs, prompt_lengths, output_lengths):
        out.append(KL_ESTIMATORS[estimator]((lp[p - 1 : p - 1 + o] - ref[p - 1 : p - 1 + o]).detach()))  # (o,)
    return out


# ---- overlong handling (DAPO; Yu et al., 2025) ----


def overlong_penalty(lengths: Tensor, max_tokens: int, buffer: int, penalty: float) -> Tensor:
    """Soft overlong punishment (B,): 0 up to max_tokens - buffer, then linear down to -penalty at max_tokens."""
    over = (lengths.float() - (max_tokens - buffer)).clamp(min=0.0)  # (B,) tokens into the buffer
    return -penalty * over / buffer  # (B,)


def truncation_keep(finish_reasons: list[str]) -> Tensor:
    """1.0 for rollouts that ended by themselves, 0.0 for those cut at max_tokens (B,)."""
    return torch.tensor([r != "length" for r in finish_reasons], dtype=torch.float32)  # (B,)


def truncation_rate(finish_reasons: list[str]) -> float:
    return sum(r == "length" for r in finish_reasons) / max(len(finish_reasons), 1)


# ---- truncated importance sampling against the rollout engine ----


def tis_weights(train_log_probs: Tensor, rollout_log_probs: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """Per-token weight min(pi_train / pi_rollout, C) (B, T), a constant (no gradient), and where the cap bit."""
    ratio = torch.exp(train_log_probs.detach() - rollout_log_probs.detach())  # (B, T)
    return ratio.clamp(max=cap), ratio > cap  # (B, T), (B, T)


def engine_log_probs(samples) -> list[Tensor]:
    """The engine's log-prob of each sampled id, per rollout (O_i,); an error when the backend returned none."""
    if any(s.token_logprobs is None for s in samples):
        raise ValueError(
            "grpo.tis_cap needs the rollout engine's sampled-token log-probs, which this backend did not return"
        )
    return [torch.tensor(s.token_logprobs, dtype=torch.float32) for s in samples]  # (O_i,) each


def _rollout_rows(rollouts, idx: list[int], train: Tensor) -> Tensor:
    """The engine's log-probs laid out like the trainer's (B, T): at response positions, the trainer's elsewhere
    (weight 1; e.g. the EOS that stands in for an empty output, which the engine never sampled)."""
    out = train.detach().clone()  # (B, T)
    for j, i in enumerate(idx):
        start, lps = len(rollouts.prompt_ids[i]) - 1, rollouts.rollout_log_probs[i]  # label t predicts id t + 1
        out[j, start : start + lps.shape[0]] = lps.to(out.device)
    return out  # (B, T)


# ---- dynamic sampling (DAPO; Yu et al., 2025) ----


def mixed_groups(rewards: Tensor, group_size: int) -> Tensor:
    """(G,) True for each group of consecutive `group_size` rollouts whose rewards are not all equal."""
    grouped = rewards.view(-1, group_size)  # (G, n)
    return grouped.max(dim=1).values != grouped.min(dim=1).values  # (G,)


def refill_sampling(sampling, refill_round: int):
    """Round 0 is the step's own sampling; refill round r draws from streams no step's round 0 uses."""
    return (
        sampling
        if not refill_round
        else dataclasses.replace(sampling, seed=derive_seed(sampling.seed, "refill", refill_round))
    )


def dynamic_sample(opts: RLOptions, generate: Callable, questions: list[dict], train_rows: list[dict], step: int):
    """Generate and grade groups until `questions_per_step` have mixed rewards (or the refill rounds run out, then fill
    with dropped groups). `generate(rows, refill_round)` returns graded samples, `group_size` per row in row order.
    Returns the samples (groups consecutive) and the counts to log."""
    n_groups, size = opts.questions_per_step, opts.group_size
    kept: list[list] = []
    dropped: list[list] = []
    generated = rounds = 0
    while True:
        samples = generate(questions, rounds)
        groups = [samples[i : i + size] for i in range(0, len(samples), size)]
        mixed = mixed_groups(torch.tensor([s.reward for s in samples]), size).tolist()  # (G,)
        kept += [g for g, m in zip(groups, mixed) if m]
        dropped += [g for g, m in zip(groups, mixed) if not m]
        generated += len(groups)
        if len(kept) >= n_groups or rounds == opts.max_refill_rounds:
            break
        rounds += 1  # a fresh draw of questions, seeded by (seed, step, round): a resumed step redraws the same
        questions = random.Random(derive_seed(opts.seed, "grpo_questions", step, rounds)).sample(train_rows, n_groups)
    filled = max(0, n_groups - len(kept))
    batch = kept[:n_groups] + dropped[:filled]  # groups, in the order they were generated
    stats = {
        "rollout/groups_generated": generated,  # groups generated this step, refills included
        "rollout/groups_dropped": len(dropped),  # of which all-equal (no learning signal)
        "rollout/refill_rounds": rounds,  # extra generation rounds
        "rollout/groups_filled": filled,  # all-equal groups trained on anyway: > 0 when the refill limit was reached
    }
    return [s for g in batch for s in g], stats


# ---- the reference policy ----


def reference_policy(policy, opts: RLOptions):
    """A frozen copy of the start policy when the KL term is on (one more set of weights; no optimizer state and no
    graph), else None. Call it before a checkpoint is restored: the reference is the run's start, not its resume."""
    if not opts.kl_coef:
        return None
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return ref


# ---- what one micro-batch adds to the policy-gradient loss ----


def loss_terms(
    opts: RLOptions, out: dict, old: Tensor | None, rollouts, idx: list[int], width: int
) -> tuple[dict, dict]:
    """The keyword arguments of `grpo_microbatch_train_step` for the options that are on, and per-token values to
    log. `out` is the training forward pass (`log_probs`, `token_entropy` with grad when the bonus is on); `old` the
    old log-probs (B, T) when the loss uses them."""
    lp = out["log_probs"]  # (B, T)
    kwargs: dict = {}
    sums: dict[str, Tensor] = {}
    if opts.tis_cap:  # pi_train at sampling time: the old log-probs, or (on-policy) this very forward pass
        train = old if old is not None else lp.detach()  # (B, T)
        rollout = _rollout_rows(rollouts, idx, train)  # (B, T)
        kwargs["pg_weight"], capped = tis_weights(train, rollout, opts.tis_cap)  # (B, T) each
        sums["tis_logprob_gap"] = (train - rollout).abs()  # (B, T)
        sums["tis_capped_frac"] = capped.float()  # (B, T)
    penalty = None
    if opts.kl_coef and not opts.kl_in_reward:
        ref = _pad(rollouts.ref_log_probs, idx, width).to(lp.device)  # (B, T)
        sums["kl"] = kl_logged(lp, ref)  # (B, T)
        penalty = opts.kl_coef * kl_penalty(lp, ref, opts.kl_estimator)  # (B, T)
    if opts.entropy_coef:
        bonus = -opts.entropy_coef * out["token_entropy"]  # (B, T) a bonus lowers the loss
        penalty = bonus if penalty is None else penalty + bonus
    if penalty is not None:  # under TIS, weighted as the PG term is: these terms too are estimated on the engine's
        kwargs["penalty"] = penalty * kwargs["pg_weight"] if opts.tis_cap else penalty  # samples (max_staleness 1)
    if opts.mask_truncated:
        kwargs["sample_weight"] = rollouts.keep[idx].unsqueeze(-1).to(lp.device)  # (B, 1)
    return kwargs, sums


def _pad(rows: list[Tensor], idx: list[int], width: int) -> Tensor:
    picked = [rows[i][:width] for i in idx]
    return torch.stack([torch.nn.functional.pad(r, (0, width - r.shape[0])) for r in picked])  # (B, T)
