"""The same GRPO work on one process with all the cores against N processes (torchrun, gloo) sharing them, in one run.

    python -m bench.distributed_ratio --model models/base --out reports/distributed_ratio.json

Work per GRPO step, as a5core.rl.grpo does it: generate and grade `--questions` x `--group` rollouts of up to
`--max-tokens` tokens with the hf backend (each rank its block of questions), then one optimizer step over them
(the handout's micro-batch of `--micro` rollouts, dealt out over ranks, gradients all-reduced once:
a5core.model.distributed).
Each layout runs in its own process group: `1 x C threads` and `N x C/N threads` on a C-core machine. Reported per
layout: the median over --steps steps (after one warm-up) of the rollout, update and whole-step seconds, the
communication seconds inside the update (the gradient all-reduce and the metric sums, timed on rank 0), and the
ratio of each layout's step time to the one-process step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from a5core.model import distributed
from a5core.model.compute import Compute


def _timed(fn, sink: list[float]):
    def wrapper(*args, **kwargs):
        t = time.monotonic()
        out = fn(*args, **kwargs)
        sink.append(time.monotonic() - t)
        return out

    return wrapper


def worker(args) -> dict:
    """One layout (this process group): time --steps GRPO steps; rank 0 returns the medians."""
    from a5core.config.sections import SamplingConfig
    from a5core.data.synthetic import generate
    from a5core.generation.hf import HFBackend
    from a5core.grader.pool import GraderPool
    from a5core.model.distributed import DistributedConfig
    from a5core.model.loading import load_policy
    from a5core.rl import grpo_update
    from a5core.rl.grpo import GRPOConfig
    from a5core.run.evaluation import generate_and_grade

    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed.setup(DistributedConfig(nproc=world))
    torch.set_num_threads(max(1, args.cores // world))
    comm: list[float] = []
    distributed.reduce_gradients = _timed(distributed.reduce_gradients, comm)  # what grpo_update calls, by module
    distributed.all_sum = _timed(distributed.all_sum, comm)
    policy, tok = load_policy(args.model, torch.device("cpu"), "float32")
    n = args.questions * args.group
    cfg = GRPOConfig(
        rollout_batch_size=n, group_size=args.group, train_batch_size=n, gradient_accumulation_steps=n // args.micro,
        max_tokens=args.max_tokens, lr=1e-6,
    )  # fmt: skip
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr)
    rows = generate(args.questions * (args.steps + 1), 8, 8, 0.3, 0)["train"]
    backend, timings = HFBackend(policy, tok, batch_size=64), []
    with GraderPool("a5core.grader:r1_zero_reward_fn", distributed.local_share(2), 10.0) as pool:
        for step in range(args.steps + 1):
            t0 = time.monotonic()
            questions = rows[step * args.questions : (step + 1) * args.questions]
            sampling = SamplingConfig(max_tokens=args.max_tokens, n=args.group, seed=step)
            samples = generate_and_grade(backend, questions, "r1_zero", sampling, pool, progress=False)
            batch, _ = grpo_update.rollout_batch(tok, samples, cfg)
            t1, before = time.monotonic(), len(comm)
            policy.train()
            grpo_update.optimizer_step(policy, opt, cfg, list(range(n)), batch, torch.device("cpu"), compute=Compute())
            policy.eval()
            t2 = time.monotonic()
            timings.append({"rollout_s": t1 - t0, "update_s": t2 - t1, "step_s": t2 - t0, "comm_s": sum(comm[before:])})
    timings = timings[1:]  # the first step warms up
    out = {k: statistics.median(t[k] for t in timings) for k in timings[0]}
    out["response_tokens_last_step"] = sum(len(s.token_ids) for s in samples)
    out["rank"] = distributed.world().rank
    distributed.leave()
    return out


def run_layout(args, nproc: int) -> dict:
    out = Path(args.scratch) / f"layout_{nproc}.json"
    script = [__file__, "--worker", "--model", args.model, "--cores", str(args.cores), "--questions",
              str(args.questions), "--group", str(args.group), "--max-tokens", str(args.max_tokens), "--micro",
              str(args.micro), "--steps", str(args.steps), "--result", str(out)]  # fmt: skip
    from a5core.model.distributed import DistributedConfig
    from a5core.stage.launch import command

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(command(DistributedConfig(nproc=nproc), script), check=True, env=env)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/base")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--scratch", default="/tmp")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--result", default=None)
    args = parser.parse_args()
    if args.worker:
        result = worker(args)
        if result.pop("rank") == 0:
            Path(args.result).write_text(json.dumps(result))
        return
    layouts = {f"1 x {args.cores} threads": run_layout(args, 1)}
    layouts[f"{args.nproc} x {args.cores // args.nproc} threads"] = run_layout(args, args.nproc)
    ref = next(iter(layouts.values()))["step_s"]
    report = {
        "command": "python -m bench.distributed_ratio " + " ".join(sys.argv[1:]),
        "work": vars(args) | {"rollouts_per_step": args.questions * args.group},
        "layouts": {k: {**v, "step_time_ratio_to_one_process": v["step_s"] / ref} for k, v in layouts.items()},
    }
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
