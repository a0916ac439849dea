"""The vLLM backend end to end on this machine's engine: the first thing to run on a GPU machine.

    python bench/vllm_check.py --model models/base [--out vllm_check.json] [--prompts 32 --n 8 --max-tokens 1024]

For each layout (on CUDA `one_gpu`, and `two_gpu` when two GPUs are visible, each in its own process; without CUDA
the CPU build's layout, `cpu`) it runs `a5core.generation.vllm.VLLMBackend` with the policy loaded from `--model`
(bf16 on cuda:0; fp32 on the CPU), one part after another, and rewrites the JSON after each:
- build: the engine's start-up (`--eager`: without compile and CUDA graphs);
- sync: the policy perturbed, then synced with both weight checks (exact, with the count compared, and log-probs);
- cycles: `--cycles` times perturb -> sleep -> wake -> reload (with the checks, and the GPU's free GiB at each
  point) -> the engine's greedy tokens against the policy's own (the hf backend's greedy loop, from the same ids):
  equal, or diverging only at a near-tie (the policy's log-probs of both tokens within `--tie-nats`). Sleep mode
  exists on CUDA only: on the CPU the JSON says so and the cycles reload without sleeping;
- seeds: the same seeded sampling twice, each from an empty prefix cache, must give the same ids (and the n samples of
  a request must differ);
- optimizer_step: one real AdamW step of the policy, then the sync and both checks (exact, log-prob probe);
- timing: one batch of `--prompts` prompts x `--n` samples of up to `--max-tokens` tokens (temperature 1, stop at
  `</answer>`), as a rollout phase of the full profile samples it.
A part that fails records its error and the run ends with status 1. Prompts are r1_zero prompts of the fixture
questions (tests/fixtures/math/validation.jsonl), numbered past its 16 so that no two are equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from a5core.config.prompts import build_prompt  # noqa: E402
from a5core.config.sections import GenerationConfig, SamplingConfig  # noqa: E402
from a5core.generation.hf import HFBackend  # noqa: E402
from a5core.generation.vllm import VLLMBackend  # noqa: E402
from a5core.model import autocast  # noqa: E402
from a5core.model.loading import load_policy  # noqa: E402
from a5core.model.logprobs import get_response_log_probs  # noqa: E402
from a5core.model.microbatch import Cut  # noqa: E402
from a5core.model.optim import make_optimizer  # noqa: E402
from a5core.model.tokenization import encode_prompts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CPU_SLEEP = "unsupported on the CPU build (vLLM: 'Sleep mode is not supported on current platform'): not exercised"


def questions(n: int) -> list[str]:
    rows = [json.loads(line) for line in (ROOT / "tests/fixtures/math/validation.jsonl").read_text().splitlines()]
    return [
        build_prompt(rows[i % len(rows)]["problem"] + (f" (variant {i // len(rows)})" if i >= len(rows) else ""))
        for i in range(n)
    ]


def perturb(policy, seed: int, scale: float) -> None:
    """Every tensor moved by `scale` of its own std: a different policy the engine has to be given."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            noise = torch.randn(p.shape, generator=g).to(device=p.device, dtype=p.dtype)
            p.add_(noise * (p.float().std() if p.numel() > 1 else 1.0) * scale)


def sync(backend: VLLMBackend, policy) -> dict:
    t0 = time.perf_counter()
    backend.sync_weights(policy)  # raises WeightSyncError when a check fails
    seconds = time.perf_counter() - t0
    weights = [(name, t.detach()) for name, t in policy.state_dict().items()]
    compared, probe = backend.verify_exact(weights), backend.verify(policy)
    return {"sync_s": round(seconds, 3), "compared": compared, "probe_nats": probe}


@torch.inference_mode()
def greedy_agreement(backend: VLLMBackend, policy, prompts: list[str], tokens: int, tie_nats: float) -> dict:
    """Engine vs policy greedy ids per prompt: equal, a near-tie divergence, or a real mismatch."""
    sampling = SamplingConfig(temperature=0.0, max_tokens=tokens, min_tokens=tokens, stop=())
    engine = [c[0].token_ids for c in backend.generate(prompts, sampling, progress=False)]
    # the policy's own sampling loop (the hf backend), greedy from the same ids
    ours = [c[0].token_ids for c in HFBackend(policy, backend.tokenizer).generate(prompts, sampling, progress=False)]
    equal, ties, mismatches = 0, [], []
    for ids, want, got in zip(encode_prompts(backend.tokenizer, prompts), ours, engine):
        want, got = list(want), list(got)
        k = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
        if k is None:
            equal += 1
            continue
        x = torch.tensor([ids + want[:k]], device=next(policy.parameters()).device)
        lp = torch.log_softmax(policy(input_ids=x).logits[0, -1].float(), dim=-1)
        gap = float(lp[want[k]] - lp[got[k]])
        (ties if gap <= tie_nats else mismatches).append({"at": k, "gap_nats": round(gap, 4)})
    return {"equal": equal, "near_ties": ties, "mismatches": mismatches, "ok": not mismatches}


def free_gib(backend: VLLMBackend) -> dict:
    """{"free_gib": ...}: the engine's GPU's free memory now ({} on the CPU build)."""
    if backend.device is None:
        return {}
    return {"free_gib": round(torch.cuda.mem_get_info(backend.device)[0] / 2**30, 2)}


def cycles(backend: VLLMBackend, policy, args) -> dict:
    """Each cycle: perturb (engine asleep) -> wake and reload (sync, both checks) -> generate greedily -> asleep again,
    with the GPU's free memory at each point (`memory`: asleep before, awake after the reload, asleep after)."""
    prompts, out = questions(args.greedy_prompts), []
    for c in range(args.cycles):
        perturb(policy, seed=100 + c, scale=args.perturb)
        asleep, before = backend.sleeping, free_gib(backend)
        record = {"asleep_before_reload": asleep, **sync(backend, policy)}  # wakes and reloads when asleep
        awake = free_gib(backend)
        record.update(greedy_agreement(backend, policy, prompts, args.greedy_tokens, args.tie_nats))
        if before:  # asleep again after generating (one_gpu): what it handed back
            record["memory"] = {"asleep_before": before, "awake_after_reload": awake, "asleep_after": free_gib(backend)}
        out.append(record)
        if not record["ok"]:
            raise AssertionError(f"cycle {c}: the engine's greedy tokens are not the policy's: {record}")
    return {"cycles": out, "sleep": "level 2 between cycles" if backend.colocated else CPU_SLEEP}


def seeds(backend: VLLMBackend, args) -> dict:
    sampling = SamplingConfig(temperature=1.0, max_tokens=32, min_tokens=32, stop=(), n=max(2, args.n), seed=7)
    prompts = questions(min(4, args.prompts))
    runs, reset = [], []
    for _ in range(2):  # each from an empty prefix cache: a repeat that read the first run's KV blocks would compute
        with backend._on_engine():  # its prompts in another shape (bf16 on CUDA: other numbers) and could differ
            reset.append(backend.llm.reset_prefix_cache())
        runs.append(backend.generate(prompts, sampling, progress=False))
    a, b = runs
    same = [[c.token_ids for c in x] for x in a] == [[c.token_ids for c in x] for x in b]
    distinct = all(len({c.token_ids for c in x}) > 1 for x in a)
    if not (same and distinct and all(reset)):
        raise AssertionError(
            f"seeded sampling: repeated equal {same}, samples of a request differ {distinct}, "
            f"prefix cache reset {reset}"
        )
    return {"seeded_repeat_equal": same, "samples_differ": distinct, "prefix_cache_reset": reset}


def optimizer_step(backend: VLLMBackend, policy, args) -> dict:
    """One real AdamW step of the policy (lr `--step-lr`, on the log-likelihood of a prompt's greedy continuation),
    then the sync with both checks: the exact weight comparison and the log-prob probe of the updated policy."""
    ids = encode_prompts(backend.tokenizer, questions(1))[0]
    device = next(policy.parameters()).device
    x = torch.tensor([ids], device=device)
    opt = make_optimizer(policy, args.step_lr, betas=(0.9, 0.95))
    policy.train()
    loss = -get_response_log_probs(policy, x[:, :-1], x[:, 1:])["log_probs"].mean()  # (1, T-1) -> ()
    loss.backward()
    before = {n: t.detach().clone() for n, t in policy.named_parameters()}
    opt.step()
    opt.zero_grad(set_to_none=True)
    policy.eval()
    moved = sum(int(not torch.equal(before[n], t)) for n, t in policy.named_parameters())
    if not moved:
        raise AssertionError(f"the optimizer step at lr {args.step_lr} changed no parameter")
    return {"lr": args.step_lr, "parameters_moved": moved, **sync(backend, policy)}


def timing(backend: VLLMBackend, args) -> dict:
    sampling = SamplingConfig(temperature=1.0, max_tokens=args.max_tokens, stop=("</answer>",), n=args.n, seed=1)
    t0 = time.perf_counter()
    out = backend.generate(questions(args.prompts), sampling, progress=False)
    seconds = time.perf_counter() - t0
    lengths = [len(c.token_ids) for cs in out for c in cs]
    return {
        "batch": f"{args.prompts} prompts x n={args.n}, up to {args.max_tokens} tokens",
        "generate_s": round(seconds, 2),
        "tokens": sum(lengths),
        "tokens_per_s": round(sum(lengths) / seconds, 1),
        "mean_tokens": round(sum(lengths) / len(lengths), 1),
        "stopped": sum(c.finish_reason == "stop" for cs in out for c in cs) / len(lengths),
    }


def run_layout(layout: str, args, save) -> bool:
    """All parts on one layout; True when every part passed."""
    device = "cuda:0" if layout != "cpu" else "cpu"
    dtype = "bfloat16" if layout != "cpu" else "float32"
    # the policy's greedy tokens are compared with the engine's, which computes in the weights' dtype: no autocast
    # (`auto` would turn it on for float32 weights on AMX/AVX512-BF16 CPUs and make the check depend on the CPU)
    precision = dataclasses.asdict(autocast.resolved("off", device, weights=dtype, quiet=True))
    policy, tokenizer = load_policy(args.model, device, dtype)
    cfg = GenerationConfig(
        backend="vllm", layout="one_gpu" if layout == "cpu" else layout,
        gpu_memory_utilization=args.gpu_memory_utilization or (0.3 if layout == "one_gpu" else 0.85),
        cuda_graphs=not args.eager,
    )  # fmt: skip
    result = {"layout": layout, "passed": [], "autocast": precision, "cuda_graphs": cfg.cuda_graphs}
    backend = None

    def build() -> dict:
        nonlocal backend
        t0 = time.perf_counter()
        backend = VLLMBackend(args.model, cfg, seed=0, tokenizer=tokenizer, policy=policy, cut=Cut())
        return {"start_s": round(time.perf_counter() - t0, 1), "vllm": backend.vllm.__version__, **free_gib(backend)}

    def perturbed_sync() -> dict:
        perturb(policy, seed=1, scale=args.perturb)
        return sync(backend, policy)

    parts = [
        ("build", build),
        ("sync", perturbed_sync),
        ("cycles", lambda: cycles(backend, policy, args)),
        ("seeds", lambda: seeds(backend, args)),
        ("optimizer_step", lambda: optimizer_step(backend, policy, args)),
        ("timing", lambda: timing(backend, args)),
    ]
    chosen = args.parts.split(",") if args.parts else [name for name, _ in parts]
    for name, part in parts:
        if name not in chosen and name != "build":
            continue
        t0 = time.perf_counter()
        try:
            result[name] = part()
            result["passed"].append(name)
        except Exception as e:  # recorded, and the run fails; later parts need the engine, so stop here
            result[name] = {"error": f"{type(e).__name__}: {e}"}
            save(result)
            return False
        print(f"[{layout}] {name} done in {time.perf_counter() - t0:.1f} s: {json.dumps(result[name])}", flush=True)
        save(result)
    return True


def saver(out: Path, layout: str):
    """Writes `out` with this layout's result merged into what earlier layouts (other processes) wrote."""

    def save(result: dict) -> None:
        data = json.loads(out.read_text()) if out.exists() else {}
        data.setdefault("layouts", {})[layout] = result
        data.update(torch=torch.__version__, cuda_devices=torch.cuda.device_count())
        if torch.cuda.is_available():
            data["device"] = torch.cuda.get_device_name(0)
        out.write_text(json.dumps(data, indent=2, default=str) + "\n")

    return save


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/base", help="a model folder (the policy and the engine load it)")
    p.add_argument("--out", default="vllm_check.json")
    p.add_argument("--layout", default=None, help="one layout (cpu, one_gpu, two_gpu); default: every usable one")
    p.add_argument("--prompts", type=int, default=32, help="timing batch: prompts")
    p.add_argument("--n", type=int, default=8, help="timing batch: samples per prompt")
    p.add_argument("--max-tokens", type=int, default=1024, help="timing batch: most tokens per sample")
    p.add_argument("--cycles", type=int, default=3, help="sleep -> wake -> reload cycles")
    p.add_argument("--greedy-prompts", type=int, default=8)
    p.add_argument("--greedy-tokens", type=int, default=48)
    p.add_argument("--tie-nats", type=float, default=0.1, help="a greedy divergence this close is a near-tie")
    p.add_argument("--perturb", type=float, default=0.01, help="each perturbation, in units of each tensor's std")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, help="default 0.3 one_gpu, 0.85 two_gpu")
    p.add_argument("--eager", action="store_true", help="no compile, no CUDA graphs (generation.cuda_graphs false)")
    p.add_argument("--step-lr", type=float, default=1e-4, help="optimizer_step: AdamW's learning rate")
    p.add_argument("--parts", default=None, help="comma-separated, e.g. timing (build always runs); default: all")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.layout is not None:  # one layout, this process (a child of the run below, or by hand)
        return 0 if run_layout(args.layout, args, saver(out, args.layout)) else 1
    out.unlink(missing_ok=True)
    if not torch.cuda.is_available():
        return 0 if run_layout("cpu", args, saver(out, "cpu")) else 1
    layouts = ["one_gpu"] + (["two_gpu"] if torch.cuda.device_count() >= 2 else [])
    # one process per layout: an engine's GPU memory and process groups are only fully released at exit
    codes = [subprocess.call([sys.executable, __file__, *(argv or sys.argv[1:]), "--layout", x]) for x in layouts]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
