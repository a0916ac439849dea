"""Time and memory of one optimizer step for each way of cutting it (a5core/model/microbatch.py), as ratios to the
handout's padded split, measured in one run on this machine.

    python -m bench.step_cut --model models/base --lengths dag --out reports/step_cut_dag.json
    python -m bench.step_cut --model models/base --lengths longtail --out reports/step_cut_longtail.json

Lengths (rollouts in groups of one question's samples, in a shuffled order as GRPO's steps take them): `dag`: the
default DAG's EI rollouts (results/ei/*/round_*/rollouts.parquet, their real groups); `longtail`: an assumed
full-profile-like shape (questions of 60-300 prompt tokens, each with --group responses log-normal with median 250,
capped at --max-tokens): an assumption, since no Qwen2.5-Math rollouts can be made here. Every prompt starts with the
r1_zero template's tokens; random ids stand in for the text. `--padding` only counts the positions each split
computes per real position (padding adds, a shared prompt saves), without running a model. Each variant runs in
its own process (float32 unless --autocast says otherwise): the median step time of --reps steps after one
warm-up, and the peak resident memory over the resident memory after loading (the CPU's analogue of peak allocated
memory). Every variant trains the same rollouts from the same weights; `max_abs_update_diff` is its
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
from dataclasses import dataclass
from pathlib import Path

import torch

from a5core.model import microbatch
from a5core.model.logprobs import MIN_SHARED_PREFIX

VARIANTS = {  # name: (GRPO micro-batch by count, SFT micro-batch, compute settings); budgets in longest rollouts
    "padded, handout micro-batch 2": (2, 2, {}),
    "padded, micro-batch 8": (8, 8, {}),
    "token budget (8 x longest)": (1, 1, {"budget_rows": 8}),
    "token budget, one prompt per micro-batch": (1, 1, {"budget_rows": 8, "group_prompts": True}),
    "packed to the same budget": (1, 1, {"budget_rows": 8, "pack_sequences": True}),
    "padded 2 + chunked logits (64)": (2, 2, {"logits_chunk": 64}),
    "padded 2 + gradient checkpointing": (2, 2, {"gradient_checkpointing": True}),
    "packed + chunked + checkpointing": (
        1,
        1,
        {"budget_rows": 8, "pack_sequences": True, "logits_chunk": 64, "gradient_checkpointing": True},
    ),
}


@dataclass(frozen=True)
class Size:
    """One rollout's shape: its prompt (the template, then its question's tokens) and its response."""

    prompt: int  # prompt tokens, the template's included
    response: int  # response tokens
    question: int  # rollouts of one question share their whole prompt


def template_tokens(tokenizer) -> int:
    """Tokens every prompt starts with (the r1_zero template before the question): what any micro-batch shares."""
    from a5core.config.prompts import build_prompt

    a, b = (tokenizer(build_prompt(q), add_special_tokens=False)["input_ids"] for q in ("1 + 1", "Find x."))
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def lengths(kind: str, n: int, max_tokens: int, tokenizer, group: int = 4, seed: int = 0) -> list[Size]:
    """n rollouts in groups of `group` per question, in a shuffled order (as GRPO's optimizer steps take them).

    `dag`: the default DAG's EI rollouts (real groups; --group is theirs); `longtail`: assumed questions of 60-300
    prompt tokens, each with `group` log-normal responses (median 250, capped at max_tokens)."""
    rng = random.Random(seed)
    if kind == "longtail":
        out = [
            Size(p, min(max_tokens, max(1, int(rng.lognormvariate(5.52, 0.7)))), q)
            for q, p in enumerate(rng.randint(60, 300) for _ in range(-(-n // group)))
            for _ in range(group)
        ][:n]
    else:  # whole questions in a random order, until n rollouts
        groups: dict[int, list[Size]] = {}
        for z in ei_lengths(tokenizer):
            groups.setdefault(z.question, []).append(z)
        out = [z for q in rng.sample(sorted(groups), len(groups)) for z in groups[q]][:n]
    rng.shuffle(out)
    return out


def ei_lengths(tokenizer) -> list[Size]:
    """Every EI rollout the default DAG wrote, grouped by (round, question)."""
    import glob

    import pyarrow.parquet as pq

    from a5core.config.prompts import build_prompt

    problems = {r["unique_id"]: r["problem"] for r in pq.read_table("data/prepared/train.parquet").to_pylist()}
    out, questions = [], {}
    for path in sorted(glob.glob("results/ei/*/round_*/rollouts.parquet")):
        for r in pq.read_table(path, columns=["unique_id", "output_tokens"]).to_pylist():
            prompt = tokenizer(build_prompt(problems[r["unique_id"]]), add_special_tokens=False)["input_ids"]
            q = questions.setdefault((path, r["unique_id"]), len(questions))
            out.append(Size(len(prompt), max(1, r["output_tokens"]), q))
    return out


def positions(sizes: list[Size], template: int, packed: bool) -> int:
    """Positions one micro-batch's forward computes: packed, its real tokens; padded, rows x its longest, less the
    prefix the shared-prefix pass computes once (the whole prompt when every row has one question, else the template;
    a5core/model/logprobs.py)."""
    lengths = [s.prompt + s.response - 1 for s in sizes]
    if packed:
        return sum(lengths)
    shared = sizes[0].prompt if len({s.question for s in sizes}) == 1 else template
    shared = min(shared, min(lengths) - 1) if len(sizes) > 1 and shared >= MIN_SHARED_PREFIX else 0
    return shared + len(sizes) * (max(lengths) - shared)


def work(sizes: list[Size], template: int, step: int, count: int, budget=None, packed=False, by_question=False):
    """Positions computed per real position when steps of `step` sequences are cut by `count` or `budget`
    (microbatch.split): above 1 by the padding, below 1 by the prompt positions the shared-prefix pass skips."""
    cells = real = 0
    for s in range(0, len(sizes), step):
        chunk = sizes[s : s + step]
        lengths = [z.prompt + z.response - 1 for z in chunk]
        keys = [z.question for z in chunk] if by_question else None
        for group in microbatch.split(lengths, count, budget, packed, keys):
            cells += positions([chunk[j] for j in group], template, packed)
        real += sum(lengths)
    return cells / real


def padding_table(a: argparse.Namespace) -> dict:
    """Positions computed per real position of each source's rollouts under the handout's split, token budgets and
    packing, steps of 16 in GRPO's shuffled order."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    template = template_tokens(tok)
    sources = {
        "EI rollouts": lengths("dag", 10**9, a.max_tokens, tok),
        "long-tail (assumed), G 4": lengths("longtail", 4096, a.max_tokens, tok, group=4),
        "long-tail (assumed), G 8": lengths("longtail", 4096, a.max_tokens, tok, group=8),
    }
    out = {"template_tokens": template}
    for name, sizes in sources.items():
        budget = 8 * max(z.prompt + z.response - 1 for z in sizes)
        out[name] = {
            "sequences": len(sizes),
            "handout split 2 of 16": work(sizes, template, 16, 2),
            "handout split 8 of 16": work(sizes, template, 16, 8),
            "token budget 8 x longest": work(sizes, template, 16, 1, budget),
            "token budget, one prompt per micro-batch": work(sizes, template, 16, 1, budget, by_question=True),
            "packed": work(sizes, template, 16, 1, budget, packed=True),
        }
    return out


def token_ids(sizes: list[Size], template: int, vocab: int) -> tuple[list[list[int]], list[list[int]]]:
    """Random prompt and response ids of `sizes`: one template for all, one question's tokens per question."""
    g = torch.Generator().manual_seed(0)
    head = torch.randint(5, vocab, (template,), generator=g).tolist()
    questions: dict[int, list[int]] = {}
    for z in sizes:
        questions.setdefault(z.question, torch.randint(5, vocab, (max(1, z.prompt - template),), generator=g).tolist())
    prompts = [head + questions[z.question] for z in sizes]
    return prompts, [torch.randint(5, vocab, (z.response,), generator=g).tolist() for z in sizes]


def run_one(a: argparse.Namespace) -> dict:
    """One variant in this process: returns its timings, memory and final weights' checksum file."""
    from a5core.base.records import RolloutBatch
    from a5core.model import autocast
    from a5core.model.compute import Compute
    from a5core.model.loading import load_policy
    from a5core.rl.grpo import GRPOConfig, optimizer_step
    from a5core.rl.sft import SFTConfig, sft_step

    torch.manual_seed(0)
    model, tok = load_policy(a.model, "cpu", "float32")
    model.train()
    sizes = lengths(a.lengths, a.rollouts, a.max_tokens, tok, a.group)
    grpo_micro, sft_micro, cut = VARIANTS[a.one]
    cut = dict(cut)
    rows = cut.pop("budget_rows", 0)
    longest = max(z.prompt + z.response for z in sizes)
    compute = Compute(
        microbatch.Cut(rows * longest if rows else None, **cut), autocast.resolved(a.autocast, "cpu", quiet=True)
    )
    microbatch.prepare(model, compute.cut)
    prompts, outputs = token_ids(sizes, template_tokens(tok), len(tok))
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    times = []
    for _ in range(a.reps + 1):
        t0 = time.perf_counter()
        if a.loop == "grpo":
            n = len(sizes)
            batch = RolloutBatch(prompts, outputs, torch.ones(n), torch.randn(n, generator=torch.Generator()), 0)
            k = n // grpo_micro
            cfg = GRPOConfig(rollout_batch_size=n, group_size=2, train_batch_size=n, gradient_accumulation_steps=k)
            row = optimizer_step(model, opt, cfg, list(range(n)), batch, torch.device("cpu"), compute)
            padding = row["perf/padding_fraction"]
        else:
            cfg = SFTConfig(batch_size=len(sizes), micro_batch_size=sft_micro)
            stats = sft_step(model, list(zip(prompts, outputs)), cfg, 0, "cpu", compute)
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
        "max_abs_update": float((weights - start).abs().max()),  # the scale of max_abs_update_diff
        "rollouts": len(sizes),
        "mean_length": sum(z.prompt + z.response for z in sizes) / len(sizes),
        "longest": longest,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--lengths", choices=["dag", "longtail"], default="dag")
    ap.add_argument("--loop", choices=["grpo", "sft", "both"], default="both")
    ap.add_argument("--rollouts", type=int, default=16)
    ap.add_argument("--group", type=int, default=4, help="samples per question (longtail)")
    ap.add_argument("--autocast", choices=["off", "auto", "bf16"], default="off", help="model.autocast (off: float32)")
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
        result = {"command": " ".join(sys.argv), "positions_per_real_position": padding_table(a)}
        print(json.dumps(result, indent=2))
        if a.out:
            Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
        return
    result = {"command": " ".join(sys.argv), "machine": _machine(), "autocast": a.autocast, "loops": {}}
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
            args += ["--max-tokens", str(a.max_tokens), "--reps", str(a.reps), "--group", str(a.group)]
            args += ["--autocast", a.autocast]
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
    from a5core.base.run_record import cpu_flags

    flags = cpu_flags()
    return {"threads": torch.get_num_threads(), "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags}


if __name__ == "__main__":
    main()
