"""Time and memory of one optimizer step for each way of cutting it (a5core/compute.py), as ratios to the handout's
padded split, measured in one run on this machine.

    python -m bench.step_cut --model models/base --lengths dag --out reports/step_cut_dag.json
    python -m bench.step_cut --model models/base --lengths longtail --out reports/step_cut_longtail.json

Lengths: `dag`: the prompts and responses of the default DAG's baseline generations
(results/baseline/generations.parquet, written by `dvc repro baseline_eval`); `longtail`: an assumed full-profile-like
shape (prompts 60-300 tokens, responses log-normal with median 250, capped at --max-tokens): an assumption, since no
Qwen2.5-Math rollouts can be made here. `--padding` only counts the padded share of the positions each split
computes, for the baseline's generations, every EI round's rollouts (results/ei/*/round_*/rollouts.parquet) and the
long-tail shape, without running a model. Each variant runs in its own process: the median step time of --reps steps
after one warm-up, and the peak resident memory over the resident memory after loading (the CPU's analogue of peak
allocated memory). Every variant trains the same rollouts from the same weights; `max_abs_update_diff` is its
largest weight difference from the reference after the steps (the update is the same to float tolerance).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from a5core import compute

VARIANTS = {  # name: (GRPO micro-batch by count, SFT micro-batch, compute settings); budgets in longest rollouts
    "padded, handout micro-batch 2": (2, 2, {}),
    "padded, micro-batch 8": (8, 8, {}),
    "token budget (8 x longest)": (1, 1, {"budget_rows": 8}),
    "packed to the same budget": (1, 1, {"budget_rows": 8, "pack_sequences": True}),
    "padded 2 + chunked logits (64)": (2, 2, {"logits_chunk": 64}),
    "padded 2 + gradient checkpointing": (2, 2, {"gradient_checkpointing": True}),
    "packed + chunked + checkpointing": (
        1,
        1,
        {"budget_rows": 8, "pack_sequences": True, "logits_chunk": 64, "gradient_checkpointing": True},
    ),
}


def lengths(kind: str, n: int, max_tokens: int, tokenizer, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt tokens, response tokens) of n rollouts."""
    rng = random.Random(seed)
    if kind == "longtail":
        return [(rng.randint(60, 300), min(max_tokens, max(1, int(rng.lognormvariate(5.52, 0.7))))) for _ in range(n)]
    import pyarrow.parquet as pq

    rows = pq.read_table("results/baseline/generations.parquet", columns=["prompt", "output_tokens"]).to_pylist()
    rows = rng.sample(rows, min(n, len(rows)))
    return [
        (len(tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]), max(1, r["output_tokens"])) for r in rows
    ]


def ei_lengths(tokenizer) -> list[tuple[int, int]]:
    """(prompt tokens, response tokens) of every EI rollout the default DAG wrote."""
    import glob

    import pyarrow.parquet as pq

    from a5core.prompts import build_prompt

    problems = {r["unique_id"]: r["problem"] for r in pq.read_table("data/prepared/train.parquet").to_pylist()}
    out = []
    for path in sorted(glob.glob("results/ei/*/round_*/rollouts.parquet")):
        for r in pq.read_table(path, columns=["unique_id", "output_tokens"]).to_pylist():
            prompt = tokenizer(build_prompt(problems[r["unique_id"]]), add_special_tokens=False)["input_ids"]
            out.append((len(prompt), max(1, r["output_tokens"])))
    return out


def padded_share(sizes: list[tuple[int, int]], count: int, budget: int | None, packed: bool, step: int) -> float:
    """Padded share of the positions computed when steps of `step` sequences are cut by `count` or `budget`."""
    lengths = [p + o - 1 for p, o in sizes]
    cells = real = 0
    for s in range(0, len(lengths), step):
        chunk = lengths[s : s + step]
        for group in compute.split(chunk, count, budget, packed):
            cells += compute.cost([chunk[j] for j in group], packed)
        real += sum(chunk)
    return 1 - real / cells


def padding_table(a: argparse.Namespace) -> dict:
    """The padded share of each source's lengths under the handout's split, a token budget and packing."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    sources = {
        "baseline generations": lengths("dag", 10**9, a.max_tokens, tok),
        "EI rollouts": ei_lengths(tok),
        "long-tail (assumed)": lengths("longtail", 4096, a.max_tokens, tok),
    }
    out = {}
    for name, sizes in sources.items():
        longest = max(p + o for p, o in sizes)
        random.Random(0).shuffle(sizes)  # the step's order (GRPO shuffles its rollouts)
        out[name] = {
            "sequences": len(sizes),
            "handout split 2 of 16": padded_share(sizes, 2, None, False, 16),
            "handout split 8 of 16": padded_share(sizes, 8, None, False, 16),
            "token budget 8 x longest": padded_share(sizes, 1, 8 * longest, False, 16),
            "packed": padded_share(sizes, 1, 8 * longest, True, 16),
        }
    return out


def run_one(a: argparse.Namespace) -> dict:
    """One variant in this process: returns its timings, memory and final weights' checksum file."""
    from a5core.grpo import GRPOConfig, optimizer_step
    from a5core.model_io import load_policy
    from a5core.records import RolloutBatch
    from a5core.sft import SFTConfig, sft_step

    torch.manual_seed(0)
    model, tok = load_policy(a.model, "cpu", "float32")
    model.train()
    sizes = lengths(a.lengths, a.rollouts, a.max_tokens, tok)
    grpo_micro, sft_micro, cut = VARIANTS[a.one]
    cut = dict(cut)
    rows = cut.pop("budget_rows", 0)
    longest = max(p + o for p, o in sizes)
    settings = {"logits_chunk": 0, "gradient_checkpointing": False, "pack_sequences": False, **cut}
    compute.configure(rows * longest if rows else "auto", **settings)
    compute.prepare(model)
    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    prompts = [torch.randint(5, vocab, (p,), generator=g).tolist() for p, _ in sizes]
    outputs = [torch.randint(5, vocab, (o,), generator=g).tolist() for _, o in sizes]
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    times = []
    for _ in range(a.reps + 1):
        t0 = time.perf_counter()
        if a.loop == "grpo":
            n = len(sizes)
            batch = RolloutBatch(prompts, outputs, torch.ones(n), torch.randn(n, generator=g), 0)
            k = n // grpo_micro
            cfg = GRPOConfig(rollout_batch_size=n, group_size=2, train_batch_size=n, gradient_accumulation_steps=k)
            row = optimizer_step(model, opt, cfg, list(range(n)), batch, torch.device("cpu"))
            padding = row["perf/padding_fraction"]
        else:
            cfg = SFTConfig(batch_size=len(sizes), micro_batch_size=sft_micro)
            stats = sft_step(model, list(zip(prompts, outputs)), cfg, 0, "cpu")
            opt.step()
            opt.zero_grad(set_to_none=True)
            padding = stats["padded"] / stats["cells"]
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save(weights, a.weights)
    return {
        "step_s": statistics.median(times[1:]),
        "peak_rss_over_load_mb": (peak - base_rss) / 1024,
        "padding_fraction": padding,
        "rollouts": len(sizes),
        "mean_length": sum(p + o for p, o in sizes) / len(sizes),
        "longest": longest,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--lengths", choices=["dag", "longtail"], default="dag")
    ap.add_argument("--loop", choices=["grpo", "sft", "both"], default="both")
    ap.add_argument("--rollouts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--out", default="")
    ap.add_argument("--padding", action="store_true", help="only the padded share of each split (no model runs)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--weights", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a)))
        return
    if a.padding:
        result = {"command": " ".join(sys.argv), "padded_share": padding_table(a)}
        print(json.dumps(result, indent=2))
        if a.out:
            Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
        return
    result = {"command": " ".join(sys.argv), "machine": _machine(), "loops": {}}
    for loop in ["grpo", "sft"] if a.loop == "both" else [a.loop]:
        result["loops"][loop] = _compare(a, loop)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


def _compare(a: argparse.Namespace, loop: str) -> dict:
    """Every variant in its own process; ratios to the first (the handout's padded split)."""
    import tempfile

    out, ref_weights = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(a.variants):
            w = f"{tmp}/{i}.pt"
            args = [sys.executable, "-m", "bench.step_cut", "--one", name, "--weights", w, "--loop", loop]
            args += ["--model", a.model, "--lengths", a.lengths, "--rollouts", str(a.rollouts)]
            args += ["--max-tokens", str(a.max_tokens), "--reps", str(a.reps)]
            proc = subprocess.run(args, capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"{name}: failed\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            weights = torch.load(w)
            ref_weights = weights if ref_weights is None else ref_weights
            row["max_abs_update_diff"] = float((weights - ref_weights).abs().max())
            out[name] = row
            print(f"{loop} {name}: {row['step_s']:.2f} s, {row['peak_rss_over_load_mb']:.0f} MB", file=sys.stderr)
    ref = out[a.variants[0]]
    for row in out.values():
        row["time_ratio"] = row["step_s"] / ref["step_s"]
        row["memory_ratio"] = row["peak_rss_over_load_mb"] / max(ref["peak_rss_over_load_mb"], 1e-9)
    return out


def _machine() -> dict:
    from a5core.runinfo import cpu_flags

    flags = cpu_flags()
    return {"threads": torch.get_num_threads(), "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags}


if __name__ == "__main__":
    main()
