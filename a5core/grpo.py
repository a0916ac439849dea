"""GRPO with verified rewards and no KL term (Algorithm 3 of the handout; Shao et al., 2024).

Per step: sample rollout_batch_size/group_size questions -> group_size rollouts each through the shared
backend (weights synced first) -> batch grading -> group-normalized advantages -> old log-probs once per
rollout batch under inference_mode when the loss needs them -> epochs_per_rollout_batch passes in
optimizer steps of train_batch_size, micro-batches of train_batch_size/gradient_accumulation_steps
through `grpo_microbatch_train_step` -> clip -> AdamW -> log -> eval every k steps -> checkpoint.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from typing import Literal

import torch
from tqdm.auto import tqdm

from a5core.advantages import group_normalize
from a5core.checkpoint import Checkpointer
from a5core.config import ConfigError, EvalConfig, PromptName
from a5core.evaluation import generate_and_grade
from a5core.generation.hf import autocast_context
from a5core.logprobs import get_response_log_probs
from a5core.losses import grpo_microbatch_train_step
from a5core.optim import make_optimizer
from a5core.prompts import REWARD_FNS
from a5core.tokenization import pad_token_id, tokenize_ids


@dataclass(frozen=True)
class GRPOConfig:
    init_policy: str = "sft_filtered"  # model folder under models/ to start from (base = the fetched model)
    n_grpo_steps: int = 200  # rollout/optimization steps
    learning_rate: float = 1e-5  # AdamW learning rate
    advantage_eps: float = 1e-6  # added to the group std
    rollout_batch_size: int = 256  # rollouts per step
    group_size: int = 8  # rollouts per question
    temperature: float = 1.0  # rollout sampling temperature
    min_tokens: int = 4  # min new tokens per rollout
    max_tokens: int = 1024  # max new tokens per rollout
    epochs_per_rollout_batch: int = 1  # passes over each rollout batch (>1 is off-policy)
    train_batch_size: int = 256  # rollouts per optimizer step
    gradient_accumulation_steps: int = 128  # micro-batches per optimizer step
    loss_type: Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"] = "reinforce_with_baseline"  # PG loss
    use_std_normalization: bool = True  # divide advantages by the group std
    std_ddof: int = 1  # 1: unbiased group std (handout), 0: population std
    length_normalization: Literal["masked_mean", "masked_normalize", "token_mean"] = "masked_mean"  # per-sequence reduction
    normalize_constant: float = 1024.0  # divisor for masked_normalize (usually max_tokens)
    cliprange: float = 0.2  # epsilon of GRPO-Clip
    prompt: PromptName = "r1_zero"  # prompt template; its reward function goes with it
    max_grad_norm: float = 1.0  # gradient clipping
    weight_decay: float = 0.0  # AdamW weight decay
    betas: list[float] = (0.9, 0.95)  # AdamW betas
    eval_every: int = 5  # steps between validation evaluations
    eval_examples: int = 1024  # validation examples per evaluation
    checkpoint_every: int = 1  # steps between resumable checkpoints (0 = never)
    time_budget_s: float = 0.0  # wall-clock budget in seconds (0 = none): stop, evaluate, report best
    seed: int = 0  # question sampling and rollout seed

    def validate(self) -> None:
        """The handout's consistency rules, checked before any work starts."""
        rules = [
            (self.train_batch_size % self.gradient_accumulation_steps == 0, "train_batch_size must be divisible by gradient_accumulation_steps"),
            (self.rollout_batch_size % self.group_size == 0, "rollout_batch_size must be divisible by group_size"),
            (self.train_batch_size >= self.group_size, "train_batch_size must be >= group_size"),
            (self.rollout_batch_size % self.train_batch_size == 0, "rollout_batch_size must be divisible by train_batch_size"),
            (self.group_size >= 2, "group_size must be >= 2 (a group of one has no baseline)"),
            (self.loss_type in ("grpo_clip", "grpo_no_clip") or self.epochs_per_rollout_batch == 1 and self.train_batch_size == self.rollout_batch_size,
             "off-policy training (epochs_per_rollout_batch > 1 or train_batch_size < rollout_batch_size) needs loss_type grpo_clip or grpo_no_clip"),
            (self.std_ddof in (0, 1), "std_ddof must be 0 or 1"),
            (self.cliprange > 0, "cliprange must be positive"),
        ]
        for ok, msg in rules:
            if not ok:
                raise ConfigError(f"grpo: {msg}")

    @property
    def needs_old_log_probs(self) -> bool:
        return self.loss_type in ("grpo_clip", "grpo_no_clip")


def rollout_tensors(tokenizer, records: list[dict]) -> tuple[list[list[int]], list[list[int]]]:
    prompts = [tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in records]
    eos = tokenizer.eos_token_id
    return prompts, [list(r["token_ids"]) or [eos] for r in records]


def _batch(prompts, outputs, idx, pad_id, device):
    t = tokenize_ids([prompts[i] for i in idx], [outputs[i] for i in idx], pad_id)
    return {k: v.to(device) for k, v in t.items()}


@torch.inference_mode()
def old_log_probs_for(policy, prompts, outputs, micro: int, pad_id: int, device) -> dict[int, torch.Tensor]:
    """Per-rollout log-probs under the rollout policy, computed once per rollout batch (no graph)."""
    out = {}
    for s in range(0, len(prompts), micro):
        idx = list(range(s, min(s + micro, len(prompts))))
        b = _batch(prompts, outputs, idx, pad_id, device)
        with autocast_context(device):
            lp = get_response_log_probs(policy, b["input_ids"], b["labels"], share_prefix=True)["log_probs"]  # (b, T)
        for j, i in enumerate(idx):
            out[i] = lp[j].clone()
    return out


def _pad_stack(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r[:width], (0, max(0, width - r.shape[0]))) for r in rows])  # (b, T)


def optimizer_step(policy, opt, cfg: GRPOConfig, idx: list[int], data: dict, device) -> dict:
    """One optimizer step over rollouts `idx`: micro-batched forward/backward, clip, AdamW step."""
    micro = cfg.train_batch_size // cfg.gradient_accumulation_steps
    loss_sum, clip_sum, ent_sum, n_tok = 0.0, 0.0, 0.0, 0
    t0 = time.monotonic()
    for s in range(0, len(idx), micro):
        mi = idx[s : s + micro]
        b = _batch(data["prompts"], data["outputs"], mi, data["pad_id"], device)
        with autocast_context(device):
            out = get_response_log_probs(policy, b["input_ids"], b["labels"], return_token_entropy=True, share_prefix=True)
        width = b["labels"].shape[1]
        old = _pad_stack([data["old"][i] for i in mi], width) if data["old"] else None  # (b, T)
        loss, meta = grpo_microbatch_train_step(
            out["log_probs"], b["response_mask"], cfg.gradient_accumulation_steps, cfg.loss_type,
            raw_rewards=data["raw"][mi].unsqueeze(-1).to(device), advantages=data["adv"][mi].unsqueeze(-1).to(device),
            old_log_probs=old, cliprange=cfg.cliprange, length_normalization=cfg.length_normalization,
            normalize_constant=cfg.normalize_constant)
        loss_sum += float(loss)
        clip_sum += float(meta["clip_fraction"]) * int(b["response_mask"].sum())
        ent_sum += float((out["token_entropy"] * b["response_mask"]).sum())
        n_tok += int(b["response_mask"].sum())
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
    opt.step()
    opt.zero_grad(set_to_none=True)
    return {"loss": loss_sum, "grad_norm": grad_norm, "clip_fraction": clip_sum / max(n_tok, 1),
            "token_entropy": ent_sum / max(n_tok, 1), "tokens_per_s": n_tok / (time.monotonic() - t0)}


def rollout_stats(records: list[dict], meta: dict) -> dict:
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {"train_reward": mean([r["reward"] for r in records]), "train_format_reward": mean([r["format_reward"] for r in records]),
            "train_answer_reward": mean([r["answer_reward"] for r in records]),
            "response_length": mean([r["output_tokens"] for r in records]),
            "response_length_correct": mean([r["output_tokens"] for r in records if r["answer_reward"] == 1]),
            "response_length_incorrect": mean([r["output_tokens"] for r in records if r["answer_reward"] != 1]),
            "frac_groups_all_equal": meta["frac_groups_all_equal"]}


def train_grpo(policy, tokenizer, backend, train_rows: list[dict], cfg: GRPOConfig, ev: EvalConfig, pool, evaluate_fn,
               ckpt: Checkpointer | None = None, log=lambda kind, row: None, examples: list | None = None,
               initial: dict | None = None) -> dict:
    """Run GRPO in place on `policy`. Returns a summary: final and best validation accuracy (and when).

    Validation runs at step 0 (or `initial`, the metrics already measured for these weights under the same
    protocol, is used), every `eval_every` steps, and at the end; the step-0 evaluation is not counted in
    the wall-clock budget.
    """
    cfg.validate()
    if pool.path != REWARD_FNS[cfg.prompt] and pool.path in REWARD_FNS.values():
        raise ConfigError(f"grpo.prompt={cfg.prompt} goes with {REWARD_FNS[cfg.prompt]}, but the grader is {pool.path}")
    device = next(policy.parameters()).device
    opt = make_optimizer(policy, cfg.learning_rate, cfg.weight_decay, tuple(cfg.betas))
    state, logs = ckpt.restore_training(policy, opt, log=log) if ckpt else ({}, [])
    start, wall_offset = state.get("step", 0), state.get("wall_s", 0.0)
    record = lambda kind, row: (logs.append((kind, row)), log(kind, row))  # noqa: E731
    sampling = replace(ev.sampling(cfg.group_size), temperature=cfg.temperature, min_tokens=cfg.min_tokens, max_tokens=cfg.max_tokens)
    if start == 0:  # where the curve starts; outside the wall-clock budget
        record("eval", {"step": 0, **(initial or evaluate_fn(policy, 0)), "wall_s": 0.0})
    t_start = time.monotonic() - wall_offset
    pad_id = pad_token_id(tokenizer)
    step = start
    for step in tqdm(range(start, cfg.n_grpo_steps), desc="grpo", initial=start, total=cfg.n_grpo_steps):
        if cfg.time_budget_s and time.monotonic() - t_start >= cfg.time_budget_s:
            break
        # generate -> grade
        questions = random.Random(cfg.seed * 100_003 + step).sample(train_rows, cfg.rollout_batch_size // cfg.group_size)
        backend.sync_weights(policy)
        records = generate_and_grade(backend, questions, cfg.prompt, replace(sampling, seed=cfg.seed * 100_003 + step), pool, progress=False)
        # advantages
        raw = torch.tensor([r["reward"] for r in records], dtype=torch.float32)  # (N,)
        adv, meta = group_normalize(raw, cfg.group_size, cfg.advantage_eps, cfg.use_std_normalization, cfg.std_ddof)  # (N,)
        prompts, outputs = rollout_tensors(tokenizer, records)
        micro = cfg.train_batch_size // cfg.gradient_accumulation_steps
        old = old_log_probs_for(policy, prompts, outputs, micro, pad_id, device) if cfg.needs_old_log_probs else None
        data = {"prompts": prompts, "outputs": outputs, "raw": raw, "adv": adv, "old": old, "pad_id": pad_id}
        # micro-batch backward -> clip -> step, for each epoch and optimizer batch
        policy.train()
        for epoch in range(cfg.epochs_per_rollout_batch):
            perm = random.Random(cfg.seed + 7919 * step + epoch).sample(range(len(records)), len(records))
            for s in range(0, len(perm), cfg.train_batch_size):
                stats = optimizer_step(policy, opt, cfg, perm[s : s + cfg.train_batch_size], data, device)
                n_opt = sum(kind == "train" for kind, _ in logs) + 1  # optimizer steps so far (> step when off-policy)
                record("train", {"step": step + 1, "epoch": epoch, "optimizer_step": n_opt, **stats, **rollout_stats(records, meta),
                                 "wall_s": time.monotonic() - t_start})
        # eval -> save
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.n_grpo_steps:
            _eval(policy, evaluate_fn, cfg, record, step + 1, t_start, records, examples)
        if ckpt and ckpt.due(step + 1):
            ckpt.save_training(policy, opt, step + 1, logs, wall_s=time.monotonic() - t_start)
    else:
        step = cfg.n_grpo_steps
    if step > 0:  # (with no step taken, the step-0 evaluation is the final one)
        _eval(policy, evaluate_fn, cfg, record, step, t_start, records if step > start else [], examples, n=0)
    evals = [row for kind, row in logs if kind == "eval"]
    final = {k: v for k, v in evals[-1].items() if k not in ("step", "wall_s")}
    best = max(evals, key=lambda r: r["accuracy"])
    return {**final, "steps_done": step, "best_accuracy": best["accuracy"], "best_step": best["step"], "best_wall_s": best["wall_s"],
            "stopped_by_time_budget": bool(cfg.time_budget_s) and step < cfg.n_grpo_steps}


def _eval(policy, evaluate_fn, cfg, record, step, t_start, records, examples, n=None) -> dict:
    metrics = evaluate_fn(policy, cfg.eval_examples if n is None else n)
    row = {"step": step, **metrics, "wall_s": time.monotonic() - t_start}
    record("eval", row)
    if examples is not None:
        examples.extend({"step": step, "unique_id": r["unique_id"], "response": r["response"], "reward": r["reward"]} for r in records[:4])
    policy.train()
    return metrics
