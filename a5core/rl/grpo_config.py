"""GRPO's section of params (`grpo`, and each `grpo_runs` entry over it): the handout's fields, its consistency rules,
and what the loop derives from them. The loop (a5core/rl/grpo.py) and its update math (a5core/rl/grpo_update.py) both
import it from here, so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from a5core.base.seeds import derive_seed
from a5core.base.typed import ClipEpsilon
from a5core.config.sections import (
    Bound,
    NonNegative,
    NonNegativeFloat,
    Positive,
    PositiveFloat,
    SamplingConfig,
    SamplingFields,
    init_policy_problem,
)
from a5core.rl.advantages import ADVANTAGE_ESTIMATORS
from a5core.rl.losses import LENGTH_NORMALIZERS, OFF_POLICY_LOSSES, PG_LOSSES, LengthNorm
from a5core.rl.rl_options import RLOptions
from a5core.rl.train_reward import reward_problems, training_reward

Beta = Annotated[float, Bound(0, 1, hi_open=True)]


@dataclass(frozen=True)
class GRPOConfig(RLOptions, SamplingFields):  # the handout's fields below; the options' (off) in RLOptions; prompt,
    # temperature, top_p, max/min_tokens and seed (the rollouts' and validation's) in SamplingFields
    init_policy: str = "sft_filtered"  # model folder under models/ to start from (base = the fetched model)
    n_grpo_steps: Positive = 200  # rollout/optimization steps
    lr: PositiveFloat = 1e-5  # AdamW learning rate
    advantage_estimator: str = "grpo"  # a name in advantages.ADVANTAGE_ESTIMATORS: grpo, rloo, reinforce_pp(_baseline)
    advantage_eps: NonNegativeFloat = 1e-6  # added to the group std
    rollout_batch_size: Positive = 256  # rollouts per step
    group_size: Annotated[int, Bound(lo=2)] = 8  # rollouts per question (a group of one has no baseline)
    epochs_per_rollout_batch: Positive = 1  # passes over each rollout batch (> 1 is off-policy)
    train_batch_size: Positive = 256  # rollouts per optimizer step
    gradient_accumulation_steps: Positive = 128  # micro-batches per optimizer step
    loss_type: str = "reinforce_with_baseline"  # policy-gradient loss, a name in losses.PG_LOSSES
    use_std_normalization: bool = True  # divide advantages by the group std
    std_ddof: Annotated[int, Bound(0, 1)] = 1  # 1: unbiased group std (handout), 0: population std
    length_normalization: LengthNorm = "masked_mean"  # per-sequence reduction, a name in losses.LENGTH_NORMALIZERS
    normalize_constant: PositiveFloat = 1024.0  # divisor for masked_normalize (usually max_tokens)
    cliprange: ClipEpsilon | None = None  # clip epsilon in (0, 1); None: the loss's own (grpo_clip 0.2, gspo 3e-4/4e-4)
    reward_fn: str | None = None  # the reward GRPO trains on (module:function); None = the prompt's (REWARD_FNS)
    max_grad_norm: PositiveFloat = 1.0  # gradient clipping
    weight_decay: NonNegativeFloat = 0.0  # AdamW weight decay
    betas: tuple[Beta, Beta] = (0.9, 0.95)  # AdamW betas
    eval_every: NonNegative = 5  # GRPO steps between mid-run validations (0 = only at the start and end)
    eval_examples: Positive = 1024  # questions in the fixed mid-run validation subset
    checkpoint_every: NonNegative = 1  # steps between resumable checkpoints (0 = never)
    time_budget_s: NonNegativeFloat = 0.0  # seconds of training (validation left out; 0 = none): stop, validate
    max_staleness: Annotated[int, Bound(0, 1)] = 0  # 0: synchronous; 1: step k+1's rollouts generate during step k
    min_tokens: NonNegative = (
        0  # must be 0: EOS held back for the first tokens is a sampler GRPO does not train (rules)
    )

    def problems(self) -> list[str]:
        """The handout's consistency rules, and names that must exist."""
        rules = [
            (self.loss_type in PG_LOSSES, f"loss_type {self.loss_type!r} is not one of {sorted(PG_LOSSES)}"),
            (
                self.advantage_estimator in ADVANTAGE_ESTIMATORS,
                f"advantage_estimator {self.advantage_estimator!r} is not one of {sorted(ADVANTAGE_ESTIMATORS)}",
            ),
            (
                self.loss_type != "gspo" or self.length_normalization == "masked_mean",
                "gspo's objective is a mean over sequences of their token means: length_normalization masked_mean",
            ),
            (
                self.temperature == 1.0 and self.top_p == 1.0,
                "GRPO's loss and TIS use the policy's log-probs at temperature 1 over the whole vocabulary: sample "
                f"with temperature 1.0 and top_p 1.0 (got {self.temperature}, {self.top_p})",
            ),
            (
                self.min_tokens == 0,
                "GRPO's loss and TIS use the policy's own log-probs, but min_tokens samples the first tokens with EOS "
                f"held back, from another distribution: set grpo.min_tokens 0 (got {self.min_tokens}); an empty "
                "response then earns its reward like any other",
            ),
            (
                self.length_normalization in LENGTH_NORMALIZERS,
                f"length_normalization must be one of {sorted(LENGTH_NORMALIZERS)}",
            ),
            (
                self.train_batch_size % self.gradient_accumulation_steps == 0,
                "train_batch_size must be divisible by gradient_accumulation_steps",
            ),
            (self.rollout_batch_size % self.group_size == 0, "rollout_batch_size must be divisible by group_size"),
            (self.train_batch_size >= self.group_size, "train_batch_size must be >= group_size"),
            (
                self.rollout_batch_size % self.train_batch_size == 0,
                "rollout_batch_size must be divisible by train_batch_size",
            ),
            (
                self.needs_old_log_probs or not self.off_policy,
                "off-policy training (epochs_per_rollout_batch > 1 or train_batch_size < rollout_batch_size) needs "
                "a loss "
                f"that uses old log-probs: one of {sorted(OFF_POLICY_LOSSES)}",
            ),
        ]
        problems = [msg for ok, msg in rules if not ok] + self.staleness_problems() + self.option_problems()
        named = [init_policy_problem(self.init_policy)] + reward_problems(self.reward_fn, self.prompt)
        return problems + SamplingFields.problems(self) + [p for p in named if p]

    def staleness_problems(self) -> list[str]:
        """What asynchronous rollouts (max_staleness 1) cannot run with, each with its reason."""
        if not self.max_staleness:
            return []
        rules = [
            (
                self.tis_cap >= 1,
                "max_staleness 1 trains on rollouts of the previous weights: set tis_cap (e.g. 2), which weights "
                "each token by the current policy's probability over the engine's that sampled it",
            ),
            (
                not self.kl_in_reward,
                "max_staleness 1 with kl_in_reward: its KL would be taken under the current weights, not under the "
                "older ones that sampled the response (use kl_coef in the loss)",
            ),
            (
                not self.dynamic_sampling,
                "max_staleness 1 with dynamic_sampling: its refill rounds decide on each round's gathered batch, "
                "one after another (max_staleness 0)",
            ),
        ]
        return [msg for ok, msg in rules if not ok]

    @property
    def train_reward(self) -> str:
        return training_reward(self.reward_fn, self.prompt)

    @property
    def off_policy(self) -> bool:
        return self.epochs_per_rollout_batch > 1 or self.train_batch_size < self.rollout_batch_size

    @property
    def needs_old_log_probs(self) -> bool:
        return self.loss_type in OFF_POLICY_LOSSES

    @property
    def micro_batch_size(self) -> int:
        return self.train_batch_size // self.gradient_accumulation_steps

    @property
    def questions_per_step(self) -> int:
        return self.rollout_batch_size // self.group_size

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.epochs_per_rollout_batch * (self.rollout_batch_size // self.train_batch_size)

    def sampling(self, step: int) -> SamplingConfig:
        return self.sampling_config(self.group_size, derive_seed(self.seed, "grpo_rollouts", step))
