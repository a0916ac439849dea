"""The CPU rollout engine, decided by measurement: the hf backend against vLLM's CPU engine on the embedded model.

One process per backend (the engine changes process-wide torch settings), the same prompts and sampling settings as
the default DAG's GRPO stage, measured inside one run of this script:
- start: loading the policy, and for vLLM also importing and starting the engine;
- weight sync: pushing the policy's weights into the engine and verifying them, the first time (hf: nothing to do),
  and the reload alone, a second time;
- rollouts: generated tokens per second over `--rounds` batches of `--prompts` prompts x `--n` samples;
- training in the same process: seconds per GRPO optimizer step on those rollouts (the engine sets torch's threads
  and pins OpenMP, which can slow the policy's own training when both share a process).

    python bench/backends.py --model models/base --out reports/bench_backends.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(backend_name: str, model: str, prompts: int, n: int, rounds: int, max_tokens: int) -> dict:
    """Run in a fresh process: the figures for one backend."""
    import torch

    from a5core.base.records import GradedSample
    from a5core.config.prompts import build_prompt
    from a5core.config.sections import GenerationConfig, SamplingConfig
    from a5core.generation import make_backend
    from a5core.model.compute import Compute
    from a5core.model.loading import load_policy
    from a5core.model.microbatch import Cut
    from a5core.model.optim import make_optimizer
    from a5core.rl.grpo import GRPOConfig, old_log_probs_for, optimizer_step, rollout_batch

    torch.manual_seed(0)
    t0 = time.monotonic()
    policy, tok = load_policy(model, "cpu", "float32")
    backend = make_backend(
        GenerationConfig(backend=backend_name, sync_tolerance=1e-3), model, policy, tok, seed=0, bf16=False, cut=Cut()
    )
    start_s = time.monotonic() - t0
    t0 = time.monotonic()
    backend.sync_weights(policy)
    sync_s = time.monotonic() - t0
    backend.cfg = dataclasses.replace(backend.cfg, verify_weight_sync=False) if hasattr(backend, "cfg") else None
    t0 = time.monotonic()
    backend.sync_weights(policy)  # the reload alone, after the first one warmed everything up
    reload_s = time.monotonic() - t0
    questions = [build_prompt(f"Compute {17 + i} + {3 * i} \\times {i + 2}.") for i in range(prompts)]
    sampling = SamplingConfig(temperature=1.0, max_tokens=max_tokens, min_tokens=max_tokens, stop=(), n=n)
    tokens, gen_s, outs = 0, 0.0, []
    for r in range(rounds):
        t0 = time.monotonic()
        outs = backend.generate(questions, SamplingConfig(**{**sampling.__dict__, "seed": r}), progress=False)
        gen_s += time.monotonic() - t0
        tokens += sum(len(c.token_ids) for cs in outs for c in cs)
    samples = [
        GradedSample(
            "q",
            j,
            p,
            c.text,
            "1",
            None,
            "wrong",
            1.0,
            float(j % 2),
            float(j % 2),
            len(c.token_ids),
            c.finish_reason,
            "",
            "",
            c.token_ids,
        )
        for p, cs in zip(questions, outs)
        for j, c in enumerate(cs)
    ]
    cfg = GRPOConfig(
        rollout_batch_size=len(samples),
        group_size=n,
        train_batch_size=len(samples),
        gradient_accumulation_steps=len(samples) // 8,
        max_tokens=max_tokens,
    )
    rollouts, _ = rollout_batch(tok, samples, cfg)
    opt = make_optimizer(policy, 1e-6)
    t0 = time.monotonic()
    optimizer_step(policy, opt, cfg, list(range(len(samples))), rollouts, torch.device("cpu"), compute=Compute())
    train_s = time.monotonic() - t0
    old_log_probs_for(policy, rollouts, 8, torch.device("cpu"), compute=Compute())
    return {
        "backend": backend_name,
        "start_s": start_s,
        "weight_sync_s": sync_s,
        "weight_reload_s": reload_s,
        "generated_tokens": tokens,
        "generation_s": gen_s,
        "tokens_per_s": tokens / gen_s,
        "train_step_s": train_s,
        "torch_threads_after_start": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/base")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", default="reports/bench_backends.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one backend in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.model, args.prompts, args.n, args.rounds, args.max_tokens)))
        return
    results = []
    for name in ("hf", "vllm"):
        cmd = [
            sys.executable,
            __file__,
            "--one",
            name,
            "--model",
            args.model,
            "--prompts",
            str(args.prompts),
            "--n",
            str(args.n),
            "--rounds",
            str(args.rounds),
            "--max-tokens",
            str(args.max_tokens),
        ]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    hf, vllm = results
    summary = {
        "settings": vars(args) | {"one": None},
        "results": results,
        "vllm_over_hf_tokens_per_s": vllm["tokens_per_s"] / hf["tokens_per_s"],
        "vllm_over_hf_train_step_s": vllm["train_step_s"] / hf["train_step_s"],
    }
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"vLLM/hf generation speed {summary['vllm_over_hf_tokens_per_s']:.2f}x; "
        f"training step time {summary['vllm_over_hf_train_step_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
