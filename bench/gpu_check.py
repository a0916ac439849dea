"""The full profile's policy side on one CUDA GPU: Qwen2.5-Math-1.5B's architecture (random weights) in bf16.

    python bench/gpu_check.py --tokenizer models/base [--out gpu_check.json] [--parts memory,sweep] [--gen-tokens 128]

Runs the project's own functions (`grpo.optimizer_step`, `sft.optimizer_step`, `grpo.old_log_probs_for`,
`HFBackend.generate`) with the full profile's settings (as composed: tests/fixtures/profiles/full.yaml), one part
after another:
- memory: peak GPU memory of one AdamW step at GRPO's worst-case micro-batch (2 x (300 + 1024) tokens) and SFT's
  (2 x (300 + 1500)), next to what `a5core.run.plan` predicts for the policy's device;
- profile: a GRPO step over 8 rollouts under torch's profiler: the GPU's busy time (kernels only), the busiest
  kernels and the operators with the most CPU time;
- steps: one GRPO optimizer step (256 rollouts = 32 questions x 8, micro-batch 2, on-policy; responses of 16-1024
  tokens drawn with a fixed seed), the old-log-prob pass over those rollouts, one SFT step (32 examples of 200-1500);
- generation: the hf backend's tokens/s (the path without vLLM), 32 prompts x 8 samples of `--gen-tokens` each;
- sweep: GRPO steps over 64 rollouts at micro-batches 2, 8 and 16 with bf16 autocast, and 2 without (see `sweep`;
  micro-batch 16 peaked at 104 GB on the H200: a smaller card records it under `sweep_out_of_memory`).
The JSON is rewritten after every part.
Random weights: time and memory depend on shapes, not values. The tokenizer only turns r1_zero prompts into ids; the
model keeps Qwen's 151,936-token vocabulary. Outside the sweep, each timing is one measurement after the earlier
parts have warmed up. The settings are the full profile's and the architecture is Qwen2.5-Math-1.5B's, not
your params.yaml's: for your own overrides, read the plan (`python -m a5core.run.plan`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from a5core.base.records import RolloutBatch  # noqa: E402
from a5core.config.prompts import R1_ZERO  # noqa: E402
from a5core.config.sections import SamplingConfig, from_dict, load_yaml  # noqa: E402
from a5core.generation.hf import HFBackend  # noqa: E402
from a5core.model.compute import Compute  # noqa: E402
from a5core.model.loading import attn_implementation  # noqa: E402
from a5core.model.logprobs import get_response_log_probs  # noqa: E402
from a5core.model.optim import make_optimizer, make_schedule  # noqa: E402
from a5core.model.tokenization import tokenize_ids  # noqa: E402
from a5core.rl import grpo, grpo_update, sft  # noqa: E402
from a5core.run import plan

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "hf:Qwen/Qwen2.5-Math-1.5B"
DRY_RUN_CARD_GB = 24.0  # the card a dry run plans for (no GPU to read it from)
GB = 1024**3


# a Qwen2-shaped tiny model (grouped-query attention, q/k/v biases, tied embeddings) for the CPU dry runs
# (`--dry-run` here and in gpu_budget.py, bench/gpu/run.py); head_dim 32: vLLM's CPU attention has no kernel for 16
TINY_QWEN2 = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}


def dry_run_arch(tokenizer) -> dict:
    """TINY_QWEN2 with the tokenizer's vocabulary."""
    return {**TINY_QWEN2, "vocab_size": len(tokenizer)}


def build_model(arch: dict, device: torch.device):
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**arch, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation=attn_implementation(device)
        )
    return model.train()


def prompts(tokenizer, n: int) -> tuple[list[str], list[list[int]]]:
    rows = [json.loads(line) for line in (ROOT / "tests/fixtures/math/validation.jsonl").read_text().splitlines()]
    texts = [R1_ZERO.format(question=rows[i % len(rows)]["problem"]) for i in range(n)]
    return texts, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def rollouts(prompt_ids: list[list[int]], lengths: list[int], vocab: int, group: int, seed: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    outs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
    rewards = torch.tensor([float(i % 2) for i in range(len(lengths))])  # (N,)
    prompts_ = [prompt_ids[i // group] for i in range(len(lengths))]
    return RolloutBatch(prompts_, outs, rewards, rewards - 0.5, pad_id=0)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn) -> tuple[float, object]:
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - t0, out


def peak(fn) -> tuple[float, tuple[float, float] | None]:
    """(seconds, (allocated, reserved) peak GB of the CUDA allocator) while `fn` runs; no GB without CUDA."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # so that "reserved" is this step's, not blocks cached by earlier parts
        torch.cuda.reset_peak_memory_stats()
    seconds, _ = timed(fn)
    if not torch.cuda.is_available():
        return seconds, None
    return seconds, (torch.cuda.max_memory_allocated() / GB, torch.cuda.max_memory_reserved() / GB)


def memory(model, opt, arch: dict, gcfg, scfg, device) -> dict:
    """Peak GB of one AdamW step at each worst-case micro-batch (distinct random prompts: no shared prefix), after a
    short step has allocated AdamW's moments, as in every step of a run but the first."""
    vocab = arch["vocab_size"]
    g_len, s_len = plan.PROMPT_TOKENS + gcfg.max_tokens, plan.PROMPT_TOKENS + plan.SFT_TRACE_TOKENS
    g = torch.Generator().manual_seed(1)
    rnd = [torch.randint(0, vocab, (plan.PROMPT_TOKENS,), generator=g).tolist() for _ in range(2)]
    grpo.optimizer_step(
        model, opt, gcfg, [0, 1], rollouts(rnd, [16, 16], vocab, 1, seed=3), device, compute=Compute()
    )  # warm-up
    batch = rollouts(rnd, [gcfg.max_tokens] * 2, vocab, 1, seed=2)
    out: dict = {"grpo_micro_batch": [2, g_len], "sft_micro_batch": [2, s_len]}
    out["grpo_measured_gb"] = peak(partial(grpo.optimizer_step, model, opt, gcfg, [0, 1], batch, device, Compute()))[1]
    examples = [(rnd[i], (batch.output_ids[i] * 2)[: plan.SFT_TRACE_TOKENS]) for i in range(2)]
    sched = make_schedule(opt, 10)
    sft_step = partial(sft.optimizer_step, model, opt, sched, examples, scfg, 0, device, Compute())
    out["sft_measured_gb"] = peak(sft_step)[1]
    for kind, length in (("grpo", g_len), ("sft", s_len)):
        predicted = plan.training_memory(plan.Arch.of(arch), "bfloat16", 2, length)
        out[f"{kind}_predicted_gb"] = sum(predicted.values())
        out[f"{kind}_predicted_items_gb"] = predicted
    return out


def step_times(model, opt, gcfg, scfg, tokenizer, vocab: int, device) -> dict:
    """One full optimizer step of each kind (the memory steps before it warmed the kernels and the allocator)."""
    rng = random.Random(0)
    _, ids = prompts(tokenizer, max(gcfg.rollout_batch_size // gcfg.group_size, scfg.batch_size))
    out: dict = {"grpo_rollouts": gcfg.rollout_batch_size, "sft_examples": scfg.batch_size}
    lengths = [rng.randint(16, gcfg.max_tokens) for _ in range(gcfg.rollout_batch_size)]
    batch = rollouts(ids, lengths, vocab, gcfg.group_size, seed=0)
    out["grpo_tokens"] = sum(lengths) + sum(len(p) for p in batch.prompt_ids)
    out["grpo_step_s"], _ = timed(
        partial(grpo.optimizer_step, model, opt, gcfg, list(range(len(batch))), batch, device, Compute())
    )
    out["old_log_probs_s"], _ = timed(
        partial(grpo.old_log_probs_for, model, batch, gcfg.micro_batch_size, device, Compute())
    )
    lengths = [rng.randint(200, plan.SFT_TRACE_TOKENS) for _ in range(scfg.batch_size)]
    batch = rollouts(ids, lengths, vocab, 1, seed=10)
    examples = list(zip(batch.prompt_ids, batch.output_ids))
    out["sft_tokens"] = sum(len(p) + len(o) for p, o in examples)
    out["sft_step_s"], _ = timed(
        partial(sft.optimizer_step, model, opt, make_schedule(opt, 10), examples, scfg, 0, device, Compute())
    )
    return out


def profile(model, opt, gcfg, tokenizer, vocab: int, device) -> dict:
    """Where one GRPO optimizer step over 8 rollouts (4 micro-batches) spends its time: the GPU's busy seconds (kernel
    rows only; an operator's row repeats its kernels' time), the busiest kernels, the operators with most CPU time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    _, ids = prompts(tokenizer, 1)
    batch = rollouts(ids, [512] * 8, vocab, 8, seed=4)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        seconds, _ = timed(partial(grpo.optimizer_step, model, opt, gcfg, list(range(8)), batch, device, Compute()))
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    busy = sum(e.self_device_time_total for e in kernels) / 1e6  # kernels only: an operator's row repeats them
    by_gpu = sorted(kernels, key=lambda e: -e.self_device_time_total)[:8]
    by_cpu = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {
        "profile_step_s": seconds,
        "profile_gpu_busy_s": busy,
        "profile_top_gpu": [f"{e.key[:60]}: {e.self_device_time_total / 1e3:.1f} ms x{e.count}" for e in by_gpu],
        "profile_top_cpu": [f"{e.key[:60]}: {e.self_cpu_time_total / 1e3:.1f} ms x{e.count}" for e in by_cpu],
        "profile_operator_calls": sum(e.count for e in events if e.device_type == DeviceType.CPU),
    }


def _forced_autocast(on: bool, device):
    """grpo's autocast context forced on or off, whatever the project's default for these weights."""
    return (
        (lambda *a, **k: torch.autocast(device.type, dtype=torch.bfloat16))
        if on
        else (lambda *a, **k: contextlib.nullcontext())
    )


def sweep(model, opt, gcfg, tokenizer, vocab: int, device, rollouts_n: int = 64, repeats: int = 3) -> dict:
    """GRPO optimizer steps over the same `rollouts_n` rollouts at micro-batches of 2 (the handout's 256 / 128), 8 and
    16 with bf16 autocast, and at 2 without: one untimed pass of each first (attention backends build a plan per new
    shape; its peak GB is recorded), then `repeats` interleaved timed rounds on a warm allocator (the fastest time of
    each), and the largest difference autocast makes to one micro-batch's log-probs."""
    rng = random.Random(5)
    _, ids = prompts(tokenizer, rollouts_n // gcfg.group_size)
    batch = rollouts(ids, [rng.randint(16, gcfg.max_tokens) for _ in range(rollouts_n)], vocab, gcfg.group_size, 6)
    out: dict = {
        "sweep_rollouts": rollouts_n,
        "sweep_longest_tokens": max(len(p) + len(o) for p, o in zip(batch.prompt_ids, batch.output_ids)),
    }
    configs = [(m, a) for m, a in ((2, True), (8, True), (16, True), (2, False)) if m <= gcfg.train_batch_size]
    original = grpo_update.autocast_context
    try:
        for rep in range(repeats + 1):
            for micro, autocast in configs:
                cfg = replace(gcfg, gradient_accumulation_steps=gcfg.train_batch_size // micro)
                grpo_update.autocast_context = _forced_autocast(autocast, device)
                step = partial(grpo.optimizer_step, model, opt, cfg, list(range(rollouts_n)), batch, device, Compute())
                key = f"micro{micro}_autocast{int(autocast)}"
                if key in out.get("sweep_out_of_memory", []):
                    continue
                if rep == 0:  # memory from the untimed pass: peak() empties the allocator's cache first
                    try:
                        out[f"sweep_gb_{key}"] = peak(step)[1]
                    except torch.OutOfMemoryError:  # a smaller card: record it, measure the others
                        opt.zero_grad(set_to_none=True)
                        torch.cuda.empty_cache()
                        out.setdefault("sweep_out_of_memory", []).append(key)
                else:
                    out[f"sweep_s_{key}"] = min(timed(step)[0], out.get(f"sweep_s_{key}", float("inf")))
        b = {k: v.to(device) for k, v in tokenize_ids(batch.prompt_ids[:2], batch.output_ids[:2], 0).items()}
        lp = []
        for autocast in (True, False):
            with torch.no_grad(), _forced_autocast(autocast, device)():
                lp.append(get_response_log_probs(model, b["input_ids"], b["labels"])["log_probs"])  # (2, T)
        out["sweep_logprob_max_abs_diff"] = float(((lp[0] - lp[1]).abs() * b["response_mask"]).max())
    finally:
        grpo_update.autocast_context = original
    return out


def generation(model, tokenizer, gen_batch: int, tokens: int) -> dict:
    texts, _ = prompts(tokenizer, gen_batch // 8)
    backend = HFBackend(model, tokenizer, batch_size=gen_batch)
    sampling = SamplingConfig(max_tokens=tokens, min_tokens=tokens, n=8, seed=0)
    backend.generate(texts[:4], SamplingConfig(max_tokens=8, min_tokens=8), progress=False)  # warm-up
    seconds, out = timed(lambda: backend.generate(texts, sampling, progress=False))
    n = sum(len(c.token_ids) for cs in out for c in cs)
    return {"gen_samples": len(texts) * 8, "gen_tokens": n, "gen_s": seconds, "gen_tokens_per_s": n / seconds}


def check(
    arch: dict,
    gcfg,
    scfg,
    tokenizer,
    device: torch.device,
    gen_tokens: int,
    parts: str = "all",
    sweep_rollouts: int = 64,
    save=lambda result: None,
) -> dict:
    """Every measurement above, printed and passed to `save` as each part completes (a later part that fails loses
    nothing measured before it); returns them as one flat dict."""
    model = build_model(arch, device)
    opt = make_optimizer(model, 1e-9, betas=tuple(gcfg.betas))
    result = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "attn_implementation": attn_implementation(device),
        "parameters": sum(p.numel() for p in model.parameters()),
        "plan_parameters": plan.Arch.of(arch).parameters,
    }
    for name, part in (
        ("memory", lambda: memory(model, opt, arch, gcfg, scfg, device)),
        ("profile", lambda: profile(model, opt, gcfg, tokenizer, arch["vocab_size"], device)),
        ("steps", lambda: step_times(model, opt, gcfg, scfg, tokenizer, arch["vocab_size"], device)),
        ("generation", lambda: generation(model, tokenizer, gcfg.rollout_batch_size, gen_tokens)),
        ("sweep", lambda: sweep(model, opt, gcfg, tokenizer, arch["vocab_size"], device, sweep_rollouts)),
    ):
        if parts != "all" and name not in parts.split(","):
            continue
        t0 = time.perf_counter()
        result.update(part())
        print(f"{name} done in {time.perf_counter() - t0:.1f} s: {json.dumps(result, default=str)}", flush=True)
        save(result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="models/base", help="a folder with a tokenizer (any)")
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--gen-tokens", type=int, default=128)
    parser.add_argument("--parts", default="all", help="comma-separated: memory,profile,steps,generation,sweep")
    parser.add_argument("--dry-run", action="store_true", help="the CPU and a tiny Qwen2: the path, not a measurement")
    args = parser.parse_args()
    if not (torch.cuda.is_available() or args.dry_run):
        sys.exit(
            "gpu_check: no CUDA device; this bench measures the GPU path (the CPU path is bench/sft_throughput.py)"
        )
    from transformers import AutoTokenizer

    profile = load_yaml((ROOT / "tests/fixtures/profiles/full.yaml").read_text())
    gcfg = from_dict(grpo.GRPOConfig, profile["grpo"], "grpo")
    scfg = from_dict(sft.SFTConfig, profile["sft"], "sft")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    dry = args.dry_run and not torch.cuda.is_available()
    card_gb = DRY_RUN_CARD_GB if dry else torch.cuda.get_device_properties(0).total_memory / GB
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def save(result: dict) -> None:
        Path(args.out).write_text(json.dumps({**result, "card_gb": card_gb}, indent=2, default=str) + "\n")

    arch = dry_run_arch(tokenizer) if dry else plan.KNOWN[SOURCE]
    device = torch.device("cpu" if dry else "cuda:0")
    check(arch, gcfg, scfg, tokenizer, device, args.gen_tokens, args.parts, save=save)


if __name__ == "__main__":
    main()
