"""The GPU half of issues #27 and #28, prepared for a GPU session: the full profile's policy side on one CUDA GPU.

    python bench/gpu_budget.py --tokenizer models/base [--out gpu_budget.json] [--parts budget,distributed]

Qwen2.5-Math-1.5B's architecture with random weights in bf16 (bench/gpu_check.py's model, rollouts and timers):
- budget: one GRPO optimizer step over the full profile's rollout batch (256 rollouts = 32 questions x 8, responses
  of 16-1,024 tokens drawn with a fixed seed) under each compute setting of `model` (a5core/model/microbatch.py): the
  handout's split (train_batch_size / gradient_accumulation_steps = 2 rollouts per micro-batch, logits whole),
  `micro_batch_tokens: auto` (the budget a5core.run.plan picks for this card, logits in chunks of 1,024, as the full
  profile sets), auto with `pack_sequences`, auto with `gradient_checkpointing` (its own, larger budget), and auto
  with `group_prompts` (one question's 8 samples per micro-batch, their whole prompt computed once). Each:
  an untimed pass (new shapes cost warm-up; its peak allocated and reserved GB), a timed pass, the plan's GB for the
  policy's GPU at that budget, the loss and gradient norm (the same step to bf16 tolerance: exact equality is
  tests/test_microbatch.py's, in float32), and the GPU's busy share (kernel time under torch's profiler over the
  step's wall time) of a step over the first 32 rollouts.
- distributed: a process group of one on `cpu:gloo,cuda:nccl`. An NCCL all-reduce of a step's gradients through
  a5core.model.distributed's bucket function (one rank: a sum that changes nothing). Then the fsdp2 path on a mesh of
  one (`distributed.shard`: `fully_shard` per decoder layer and the root): one optimizer step at the auto budget with
  the chunked LM head (inside the root unit's hooks, `distributed.as_forward`), its
  peak GB against the plan's items for fsdp2 (weights, gradients and AdamW state not divided on one rank, plus the
  gathered layers, the gathered root and the whole-weights copy the hf backend uses), `full_weights` against the
  shards, and the whole state dicts. What
  needs two GPUs (a real reduce-scatter; 1 rank against 2) is tests/test_distributed.py's, on gloo.
The JSON is rewritten after every measurement, so a part that fails loses nothing measured before it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from a5core.config.sections import GenerationConfig, ModelConfig, from_dict, load_yaml  # noqa: E402
from a5core.model import distributed, microbatch  # noqa: E402
from a5core.model.compute import Compute  # noqa: E402
from a5core.model.microbatch import Cut  # noqa: E402
from a5core.model.optim import make_optimizer  # noqa: E402
from a5core.rl import grpo
from a5core.run import plan
from bench.gpu_check import DRY_RUN_CARD_GB, GB, SOURCE, build_model, dry_run_arch, peak, prompts, rollouts, timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILED = 32  # rollouts in the profiled step (the busy share is a ratio; it needs no whole step)


def rollout_batch(gcfg, tokenizer, vocab: int, n: int):
    """`n` rollouts of gcfg.group_size samples per question, responses of 16 to max_tokens tokens (seeded)."""
    rng = random.Random(0)
    _, ids = prompts(tokenizer, n // gcfg.group_size)
    return rollouts(ids, [rng.randint(16, gcfg.max_tokens) for _ in range(n)], vocab, gcfg.group_size, seed=0)


def settings(params: dict, arch: plan.Arch, card_gb: float) -> dict[str, tuple[ModelConfig, int | None]]:
    """{name: (model section, token budget or None for the handout's split)} of each compute setting measured."""
    model = from_dict(ModelConfig, params["model"], "model")
    gen = from_dict(GenerationConfig, params["generation"], "generation")
    handout = replace(model, micro_batch_tokens="auto", logits_chunk=0)
    out: dict[str, tuple[ModelConfig, int | None]] = {"handout": (handout, None)}
    for name, cfg in (
        ("auto", model),
        ("auto_packed", replace(model, pack_sequences=True)),
        ("auto_checkpointing", replace(model, gradient_checkpointing=True)),
        ("auto_grouped", replace(model, group_prompts=True)),  # last: the newest, first to go if time runs out
    ):
        out[name] = (cfg, plan.micro_batch_tokens(params, arch, cfg, gen, card_gb) or None)
    return out


def planned_gb(params: dict, arch: plan.Arch, model: ModelConfig, tokens: int, card_gb: float) -> float:
    """The plan's total for the policy's GPU with a micro-batch of `tokens` tokens."""
    gen = from_dict(GenerationConfig, params["generation"], "generation")
    devices = plan.training_plans(params, arch, model, gen, tokens, card_gb)
    return next(d for d in devices if "training" in d.name).total


def busy_share(step, device) -> dict:
    """The GPU's busy share of `step()`: kernel seconds under torch's profiler over the step's seconds."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        seconds, _ = timed(step)
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in kernels) / 1e6
    return {"profiled_s": seconds, "gpu_busy_s": busy, "gpu_busy_share": busy / seconds}


def budget(model, opt, gcfg, batch, params: dict, arch: plan.Arch, card_gb: float, device, save) -> dict:
    """The rollout batch's optimizer step under each compute setting (see the module docstring)."""
    lengths = [len(p) + len(o) for p, o in zip(batch.prompt_ids, batch.output_ids)]
    out: dict = {"budget_rollouts": len(batch), "budget_tokens": sum(lengths)}
    idx = list(range(len(batch)))
    for name, (cfg, tokens) in settings(params, arch, card_gb).items():
        compute = Compute(cut=Cut.of(cfg, tokens))
        cut = compute.cut
        microbatch.prepare(model, cut)
        step = partial(grpo.optimizer_step, model, opt, gcfg, idx, batch, device, compute)
        row: dict = {"micro_batch_tokens": cut.micro_batch_tokens, "logits_chunk": cut.logits_chunk}
        row["micro_batches"] = len(microbatch.micro_batches(lengths, gcfg.micro_batch_size, cut, batch.prompt_ids))
        planned = tokens or gcfg.micro_batch_size * max(lengths)
        row["plan_gb"] = planned_gb(params, arch, cfg, planned, card_gb)
        try:
            row["warmup_s"], row["peak_gb"] = peak(step)  # (allocated, reserved), None without CUDA
            row["step_s"], metrics = timed(step)
            row["loss"], row["grad_norm"] = metrics["train/loss"], metrics["train/grad_norm"]
            row["padding_fraction"] = metrics["perf/padding_fraction"]
            row.update(
                busy_share(
                    partial(grpo.optimizer_step, model, opt, gcfg, idx[:PROFILED], batch, device, compute), device
                )
            )
        except torch.OutOfMemoryError as err:  # a smaller card: record it, measure the others
            opt.zero_grad(set_to_none=True)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            row["error"] = f"out of memory: {str(err)[:200]}"
        out[f"budget_{name}"] = row
        print(f"budget {name}: {json.dumps(row)}", flush=True)
        save(out)
    microbatch.prepare(model, Cut())
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def distributed_part(arch: dict, gcfg, batch, params: dict, card_gb: float, device, save) -> dict:
    """NCCL on a group of one, then the fsdp2 path on a mesh of one (see the module docstring)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    out: dict = {"dist_backend": str(dist.get_backend())}
    try:
        out.update(_all_reduce_check(arch, batch, device))
        save(out)
        out.update(_fsdp2_check(arch, gcfg, batch, params, card_gb, device))
        save(out)
    finally:
        distributed.leave()  # one process again
    return out


def _all_reduce_check(arch: dict, batch, device) -> dict:
    """A step's gradients through distributed._all_reduce on this group: a sum over one rank changes nothing."""
    model = build_model(arch, device)
    loss = model(torch.tensor([batch.prompt_ids[0]], device=device)).logits.float().logsumexp(-1).mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    before = [g.clone() for g in grads[:4]]
    seconds, _ = timed(lambda: distributed._all_reduce(grads))
    same = all(torch.equal(a, b) for a, b in zip(before, grads[:4]))
    gb = sum(g.numel() * g.element_size() for g in grads) / GB
    return {"all_reduce_gb": gb, "all_reduce_s": seconds, "all_reduce_unchanged": same}


def _fsdp2_check(arch: dict, gcfg, batch, params: dict, card_gb: float, device) -> dict:
    """One optimizer step on the fsdp2 path at the auto budget: peak GB against the plan's fsdp2 items, the whole
    weights against the shards, and the whole state dicts."""
    model_cfg, tokens = settings(params, plan.Arch.of(arch), card_gb)["auto"]
    compute = Compute(cut=Cut(tokens, model_cfg.logits_chunk))
    model = distributed.shard(build_model(arch, device), "fsdp2")  # the group of one: a mesh of one
    opt = make_optimizer(model, 1e-9, betas=tuple(gcfg.betas))
    idx = list(range(len(batch)))
    step = partial(grpo.optimizer_step, model, opt, gcfg, idx, batch, device, compute)
    seconds, gb = peak(step)
    size = (plan.Arch.of(arch), "bfloat16", 1, tokens or 2 * (plan.PROMPT_TOKENS + gcfg.max_tokens), "nearest")
    planned = plan.training_memory(*size, model_cfg.logits_chunk)  # one rank: nothing divided
    fsdp2 = plan.training_memory(*size, model_cfg.logits_chunk, shards=2, whole_copy=True)  # shard(): every rank's
    planned.update({k: v for k, v in fsdp2.items() if k.startswith("fsdp2:")})  # gathered layers, root, whole copy
    full = distributed.full_weights(model)
    with torch.no_grad():
        gap = max(
            float((p.full_tensor().float() - full.get_parameter(n).float()).abs().max())
            for n, p in model.named_parameters()
        )
    state_s, state = timed(lambda: distributed.model_state(model))
    return {
        "fsdp2_step_s": seconds,
        "fsdp2_peak_gb": gb,
        "fsdp2_plan_gb": sum(planned.values()),
        "fsdp2_plan_items_gb": planned,
        "fsdp2_full_weights_max_abs_diff": gap,
        "fsdp2_state_dict_s": state_s,
        "fsdp2_state_dict_tensors": len(state),
    }


def check(arch: dict, gcfg, params: dict, tokenizer, device, card_gb: float, parts: str, rollouts_n: int, save):
    """The parts above, each saved as it completes; returns them as one flat dict."""
    result: dict = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "card_gb": card_gb,
    }
    batch = rollout_batch(gcfg, tokenizer, arch["vocab_size"], rollouts_n)
    if parts == "all" or "budget" in parts.split(","):
        model = build_model(arch, device)
        opt = make_optimizer(model, 1e-9, betas=tuple(gcfg.betas))
        part = budget(
            model, opt, gcfg, batch, params, plan.Arch.of(arch), card_gb, device, lambda r: save({**result, **r})
        )
        result.update(part)
        del model, opt
        save(result)
    if parts == "all" or "distributed" in parts.split(","):
        t0 = time.perf_counter()
        result.update(distributed_part(arch, gcfg, batch, params, card_gb, device, lambda r: save({**result, **r})))
        result["distributed_s"] = time.perf_counter() - t0
        save(result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="models/base", help="a folder with a tokenizer (any)")
    parser.add_argument("--out", default="gpu_budget.json")
    parser.add_argument("--parts", default="all", help="comma-separated: budget,distributed")
    parser.add_argument("--rollouts", type=int, default=0, help="rollouts per step (default: the profile's batch)")
    parser.add_argument("--dry-run", action="store_true", help="the CPU and a tiny Qwen2: the path, not a measurement")
    args = parser.parse_args()
    if not (torch.cuda.is_available() or args.dry_run):
        sys.exit("gpu_budget: no CUDA device; the CPU's equivalence tests are tests/test_microbatch.py")
    from transformers import AutoTokenizer

    params = load_yaml((ROOT / "tests/fixtures/profiles/full.yaml").read_text())
    gcfg = from_dict(grpo.GRPOConfig, params["grpo"], "grpo")
    dry = args.dry_run and not torch.cuda.is_available()
    card_gb = DRY_RUN_CARD_GB if dry else torch.cuda.get_device_properties(0).total_memory / GB
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def save(result: dict) -> None:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")

    n = args.rollouts or gcfg.train_batch_size
    arch = dry_run_arch(tokenizer) if dry else plan.KNOWN[SOURCE]
    check(arch, gcfg, params, tokenizer, torch.device("cpu" if dry else "cuda:0"), card_gb, args.parts, n, save)


if __name__ == "__main__":
    main()
