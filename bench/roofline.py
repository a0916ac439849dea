"""This CPU's limit for the default profile's work, measured in the same run as the work (issue 65).

    python bench/roofline.py --model models/base --out reports/roofline        # after `dvc repro fetch_model`

1. Matmul rates, float32 and bf16, at the model's own shapes (every product of one decoder layer and the LM head, at
   M = the GRPO rollout batch, the validation batch and a training micro-batch's tokens) and at a 2048-square shape;
   memory bandwidth (a 256 MiB copy).
2. The limit of each piece of work: the larger of (a) its products at their shapes, each timed alone with its
   operands in cache, summed over the layers, and (b) streaming the weights from memory once per decode step (three
   passes for a training micro-batch). Attention's own products, sampling, the prompt's prefill and the optimizer
   are left out of it.
3. The work: the hf backend generating the GRPO rollouts (4 questions x 4 samples) and a validation batch (32
   questions x 2 samples), 64 new tokens at most, tokens/s; one training micro-batch (the rollouts' prompts and
   responses) forward and backward through a5's log-prob path (the shared prompt prefix computed once, as in
   training; the limit counts the rows computed), padded tokens/s. Each in float32 and under bf16 autocast,
   generation also from bf16 weights (the backend's copy, `generation.dtype: bfloat16`), each as a fraction of its
   limit; generation also with its batch occupancy (sequences stop early).
   The numerics of generating in bf16: the sampled tokens' log-probs as the generating weights gave them, against the
   float32 policy's on the same tokens (what GRPO trains with), for float32 and bf16-weight rollouts.
4. Where the time goes: torch.profiler over one rollout generation (float32 and bf16 weights) and one micro-batch, by
   operator class, with the share no operator accounts for (Python and the framework between operators).

Writes <out>.json and <out>.md. Run it on a quiet machine: every ratio is within this one run, but a busy core
slows the pieces unevenly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch

from a5core.base.run_record import cpu_flags, cpu_model
from a5core.config.prompts import build_prompt
from a5core.config.sections import SamplingConfig
from a5core.data.synthetic import generate as synthetic
from a5core.generation import HFBackend
from a5core.model.loading import build_tiny_model, load_policy
from a5core.model.logprobs import get_response_log_probs, shared_prefix_length
from a5core.model.tokenization import tokenize_ids
from a5core.stage.entry import quiet_known_noise

DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16}


def timed(fn, reps: int = 5) -> float:
    """Median seconds of `fn()` over `reps` runs after one warm-up."""
    return median_s(fn, reps)[0]


def median_s(fn, reps: int) -> tuple[float, object]:
    """Median seconds of `fn()` over `reps` runs after one warm-up, and its last result."""
    out = fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def write_results(out: str, res: dict, render) -> None:
    """<out>.json and <out>.md (`render(res)`, also printed)."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(res, indent=1) + "\n")
    Path(f"{out}.md").write_text(render(res))
    print(render(res))


def bench_model(a: argparse.Namespace, script: str) -> tuple[torch.nn.Module, object, dict]:
    """(model, tokenizer, header) of a bench over the policy: `--tiny`, a tiny random model, else `--model` (float32),
    seeded and in eval mode; the header every such report opens with (its command, the machine, torch, the model)."""
    quiet_known_noise()
    torch.manual_seed(0)
    model, tok = build_tiny_model(seed=0) if a.tiny else load_policy(a.model)
    model.eval()
    header = {
        "command": f"python bench/{script} {'--tiny' if a.tiny else f'--model {a.model}'} --out {a.out}",
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "model": "a tiny random model" if a.tiny else a.model,
        "params": sum(p.numel() for p in model.parameters()),
    }
    return model, tok, header


def mm_seconds(m: int, k: int, n: int, dtype: torch.dtype) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    reps = max(3, min(50, int(2e8 / (2 * m * k * n))))
    return timed(lambda: torch.mm(a, b), reps)


def layer_products(cfg) -> list[tuple[str, int, int]]:
    """(name, k, n) of each product of one decoder layer: M x k times k x n."""
    d, f, kv = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads),
    )
    return [("q", d, d), ("k", d, kv), ("v", d, kv), ("o", d, d), ("gate", d, f), ("up", d, f), ("down", f, d)]


def products_limit(cfg, m: int, dtype: torch.dtype) -> dict:
    """Seconds and FLOPs of one forward's products at M = m: the layers' and the LM head's, each timed alone."""
    layer = {name: mm_seconds(m, k, n, dtype) for name, k, n in layer_products(cfg)}
    head = mm_seconds(m, cfg.hidden_size, cfg.vocab_size, dtype)
    flops = (
        2
        * m
        * (cfg.num_hidden_layers * sum(k * n for _, k, n in layer_products(cfg)) + cfg.hidden_size * cfg.vocab_size)
    )
    seconds = cfg.num_hidden_layers * sum(layer.values()) + head
    return {"seconds": seconds, "flops": flops, "gflops": flops / seconds / 1e9, "lm_head_share": head / seconds}


def bandwidth() -> float:
    """Bytes per second of a 256 MiB copy (read + write)."""
    a = torch.empty(64 * 2**20, dtype=torch.float32).normal_()
    b = torch.empty_like(a)
    return 2 * a.numel() * 4 / timed(lambda: b.copy_(a), 5)


def autocast(on: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()


GENERATION = {"float32": False, "bf16 autocast": False, "bf16 weights": True}  # -> the backend's bf16 copy


def generation(model, tok, prompts: list[str], n: int, precision: str) -> dict:
    """The hf backend on `prompts` x `n` samples in one batch: tokens/s, decode steps, occupancy. `precision`: one of
    GENERATION (bf16 autocast: the backend's float32 loop under the bench's own autocast; bf16 weights: its copy)."""
    backend = HFBackend(model, tok, batch_size=len(prompts) * n, bf16=GENERATION[precision])
    sampling = SamplingConfig(max_tokens=64, min_tokens=0, n=n, seed=0)
    with autocast(precision == "bf16 autocast"):
        backend.generate(prompts[:1], SamplingConfig(max_tokens=4, min_tokens=0), progress=False)  # warm-up
        t = time.perf_counter()
        out = backend.generate(prompts, sampling, progress=False)
        seconds = time.perf_counter() - t
    lengths = [len(c.token_ids) for cs in out for c in cs]
    steps = max(lengths)
    return {
        "sequences": len(lengths),
        "tokens": sum(lengths),
        "seconds": seconds,
        "tokens_per_s": sum(lengths) / seconds,
        "decode_steps": steps,
        "occupancy": sum(lengths) / (steps * len(lengths)),
        **sampled_tokens(prompts, out),
    }


def sampled_tokens(prompts: list[str], out: list) -> dict:
    """{"completions": [(prompt, token ids)], "logprobs": [each sampled token's log-prob]} of a backend's output, as
    `logprob_gap` reads them."""
    return {"completions": [(p, c.token_ids) for p, cs in zip(prompts, out) for c in cs],
            "logprobs": [lp for cs in out for c in cs for lp in c.token_logprobs]}  # fmt: skip


def logprob_gap(model, tok, g: dict) -> dict:
    """The sampled tokens' log-probs as generation gave them against the float32 model's over the same tokens."""
    batch = micro_batch(tok, g["completions"])
    with torch.no_grad():
        lp = get_response_log_probs(model, batch["input_ids"], batch["labels"])["log_probs"]  # (B, T)
    train = lp[batch["response_mask"].bool()]  # (N,): row by row, each row's response in order
    gap = (torch.tensor(g["logprobs"]) - train).abs()  # (N,)
    return {"tokens": gap.numel(), "mean_abs": gap.mean().item(), "max_abs": gap.max().item(),
            "over_0.1": (gap > 0.1).float().mean().item()}  # fmt: skip


def micro_batch(tok, completions: list) -> dict:
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p, _ in completions]
    return tokenize_ids(ids, [list(c) for _, c in completions], tok.pad_token_id or tok.eos_token_id)


def training(model, batch: dict, bf16: bool) -> dict:
    """One micro-batch's forward and backward through `get_response_log_probs` (GRPO's path): tokens/s."""
    ids, labels = batch["input_ids"], batch["labels"]

    def step():
        with autocast(bf16):
            lp = get_response_log_probs(model, ids, labels, share_prefix=True)["log_probs"]
        (lp * batch["response_mask"]).sum().backward()
        model.zero_grad(set_to_none=True)

    seconds = timed(step, 3)
    return {"tokens": ids.numel(), "seconds": seconds, "tokens_per_s": ids.numel() / seconds}


MATMULS = {"mm", "addmm", "matmul", "linear", "bmm", "baddbmm"}  # aten operator names, exactly
CLASSES = (  # (class, parts of aten operator names)
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention")),
    ("softmax and sampling", ("softmax", "exp", "multinomial", "sort", "cumsum", "topk", "argmax", "exponential")),
)


def op_class(key: str) -> str:
    name = key.removeprefix("aten::")
    if name in MATMULS:
        return "matmuls"
    return next((cls for cls, parts in CLASSES if any(part in name for part in parts)), "other operators")


def where_time_goes(fn) -> dict:
    """Self CPU seconds by operator class under torch.profiler, and the wall time no operator accounts for."""
    from torch.profiler import ProfilerActivity, profile

    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    wall = time.perf_counter() - t
    by = dict.fromkeys(["matmuls", *(cls for cls, _ in CLASSES), "other operators"], 0.0)
    top = []
    for e in prof.key_averages():
        s = e.self_cpu_time_total / 1e6
        by[op_class(e.key)] += s
        top.append((s, e.key))
    by["between operators (Python, framework)"] = max(0.0, wall - sum(by.values()))
    return {"wall_s": wall, "seconds": by, "top": [(k, round(s, 3)) for s, k in sorted(top, reverse=True)[:8]]}


def report(res: dict) -> str:
    lines = [
        "# This CPU's limit for the default profile's work (bench/roofline.py)",
        "",
        f"    {res['command']}",
        "",
        f"{res['cpu']}, {res['threads']} threads, torch {res['torch']}, model {res['model']} "
        f"({res['params'] / 1e6:.0f}M parameters, float32 weights). One run; every ratio is within it.",
        "",
        "## Matmul rates and memory",
        "",
        "| shape | float32 GFLOP/s | bf16 GFLOP/s |",
        "|---|---:|---:|",
    ]
    for name, row in res["gemm"].items():
        lines.append(f"| {name} | {row.get('float32', float('nan')):.1f} | {row.get('bf16', float('nan')):.1f} |")
    lines += [
        "",
        f"Memory bandwidth (256 MiB copy): {res['bandwidth_gb_s']:.1f} GB/s; the float32 weights "
        f"({res['weights_gb']:.2f} GB) stream in {res['weights_gb'] / res['bandwidth_gb_s'] * 1e3:.0f} ms.",
        "",
        "## The work against its limit",
        "",
        "| work | precision | tokens/s | limit tokens/s (products / weights from memory) | fraction | occupancy |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for w in res["work"]:
        occ = f"{w['occupancy']:.2f}" if "occupancy" in w else "—"
        lines.append(
            f"| {w['name']} | {w['precision']} | {w['tokens_per_s']:.0f} | {w['limit_tokens_per_s']:.0f} "
            f"({w['products_tokens_per_s']:.0f} / {w['memory_tokens_per_s']:.0f}) | {w['fraction']:.2f} | {occ} |"
        )
    lines += [
        "",
        "Memory limits count the weights the work reads: float32, or the bf16 copy (half the bytes) for bf16 weights.",
        "",
        "## Generating in bf16: the sampled tokens' log-probs against the float32 policy's",
        "",
        "The GRPO rollouts above, rescored by the float32 model (what training computes). |Δ| in nats per token.",
        "",
        "| rollouts from | tokens | mean abs Δ | max abs Δ | share of tokens with abs Δ > 0.1 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, g in res["logprob_gap"].items():
        lines.append(f"| {name} | {g['tokens']} | {g['mean_abs']:.2g} | {g['max_abs']:.2g} | {g['over_0.1']:.3f} |")
    lines += ["", "## Where the time goes (float32 unless named, torch.profiler, self CPU seconds)", ""]
    for name, prof in res["profile"].items():
        parts = ", ".join(f"{k} {v:.2f} s ({v / prof['wall_s']:.0%})" for k, v in prof["seconds"].items())
        lines += [f"- **{name}** ({prof['wall_s']:.2f} s): {parts}.", f"  Top operators: {prof['top']}"]
    return "\n".join(lines + ["", *what_stands_between(res)]) + "\n"


def what_stands_between(res: dict) -> list[str]:
    """From the profiles: how far generation is from its limit, and what takes the time that is not its products."""
    lines = ["## What stands between generation and its limit (from the profiles above)", ""]
    for name, prof in res["profile"].items():
        if not name.startswith("generate: GRPO rollouts"):
            continue
        precision = "bf16 weights" if name.endswith("bf16 weights") else "float32"
        row = next(
            w for w in res["work"] if w["name"] == "generate: GRPO rollouts (4 x 4)" and w["precision"] == precision
        )
        sec, wall = prof["seconds"], prof["wall_s"]
        share = sec["matmuls"] / wall
        rest = [(op, t) for op, t in prof["top"] if op_class(op) != "matmuls"][:3]
        between = sec["between operators (Python, framework)"]
        lines.append(
            f"- **{precision}**: {row['fraction']:.2f} of the limit, with the products {share:.0%} of the time. Were "
            f"everything else removed, the products alone would run at {row['fraction'] / share:.2f} of the limit "
            "(an estimate: the profiler slows the rest too; inside the loop, at M = the live rows, the products run "
            "slower than timed alone). The rest: "
            + ", ".join(f"`{op}` {t:.2f} s" for op, t in rest)
            + " (the KV cache's growth and copies, the grouped keys and values repeated per head), and "
            f"{between:.2f} s between operators, {between / row['decode_steps'] * 1e3:.0f} ms per decode step of "
            f"{row['decode_steps']}: Python and dispatch over every layer."
        )
    lines += [
        "",
        "Tried since: a static KV cache (no `cat`) and a compiled decode step (`torch.compile`, fixed shapes), which "
        "remove the time between operators: no faster than the backend's own path on the same work, and the model's "
        "products alone, with the weights streamed from memory as a decode step streams them, run well below their "
        "rate timed in cache ([decode_paths.md](decode_paths.md), bench/decode_paths.py).",
        "",
        "The bf16 copy in the default DAG (faster stages, but GRPO trained on its rollouts lost its gain): "
        "[grpo_sweep.md](grpo_sweep.md#bf16-generation).",
    ]
    return lines


def progress(row: dict) -> None:
    print(f"{row['name']}, {row['precision']}: {row['tokens_per_s']:.0f} tokens/s, {row['fraction']:.2f} of the limit",
          flush=True)  # fmt: skip


def limit_row(name: str, precision: str, measured: dict, tokens: int, passes: int, products: dict, weights: int,
              bw: float) -> dict:  # fmt: skip
    """The work's tokens/s against its limit: `tokens` per `passes` forward-sized passes of products and weights."""
    products_tps = tokens / (passes * products["seconds"])
    memory_tps = tokens / (passes * weights / bw)
    limit = min(products_tps, memory_tps)
    return {
        "name": name,
        "precision": precision,
        **measured,
        "products_tokens_per_s": products_tps,
        "memory_tokens_per_s": memory_tps,
        "limit_tokens_per_s": limit,
        "fraction": measured["tokens_per_s"] / limit,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--out", default="reports/roofline")
    ap.add_argument("--square", type=int, default=2048, help="the side of the square GEMM")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model (checks the bench)")
    ap.add_argument("--render", action="store_true", help="only write <out>.md again from <out>.json")
    a = ap.parse_args()
    if a.render:
        Path(f"{a.out}.md").write_text(report(json.loads(Path(f"{a.out}.json").read_text())))
        return
    model, tok, header = bench_model(a, "roofline.py")
    cfg = model.config
    weights = header["params"] * 4  # float32 bytes
    rows = synthetic(10, 64, 10, 0.3, seed=123)["validation"]
    prompts = [build_prompt(r["problem"]) for r in rows]
    precisions = {"float32": False, "bf16 autocast": True}
    bw = bandwidth()
    n = a.square
    gemm = {f"square {n}": {k: 2 * n**3 / mm_seconds(n, n, n, dt) / 1e9 for k, dt in DTYPES.items()}}
    limits = {}

    def products(m: int, bf16: bool) -> dict:
        if (m, bf16) not in limits:
            limits[m, bf16] = products_limit(cfg, m, DTYPES["bf16" if bf16 else "float32"])
            gemm.setdefault(f"one forward's products, M = {m}", {})["bf16" if bf16 else "float32"] = limits[m, bf16][
                "gflops"
            ]
        return limits[m, bf16]

    work, rollouts, gaps = [], None, {}
    for name, qs, n in (("GRPO rollouts (4 x 4)", 4, 4), ("validation batch (32 x 2)", 32, 2)):
        for precision in GENERATION:
            g = generation(model, tok, prompts[:qs], n, precision)
            rollouts = rollouts or g["completions"]
            if name.startswith("GRPO") and precision != "bf16 autocast":  # what the backend can generate with
                gaps[precision] = logprob_gap(model, tok, g)
            measured = {k: v for k, v in g.items() if k not in ("completions", "logprobs")}
            bf16, streamed = precision != "float32", weights // 2 if precision == "bf16 weights" else weights
            work.append(
                limit_row(f"generate: {name}", precision, measured, qs * n, 1, products(qs * n, bf16), streamed, bw)
            )
            progress(work[-1])
    batch = micro_batch(tok, rollouts)
    b, t_len = batch["input_ids"].shape
    shape = f"{b}x{t_len}"
    prefix = shared_prefix_length(batch["input_ids"])  # the path computes it once (share_prefix), not b times
    computed = prefix + b * (t_len - prefix)  # the rows its products have
    for precision, bf16 in precisions.items():  # a backward has about twice a forward's products: 3 passes
        t = training(model, batch, bf16)
        lim = products(computed, bf16)  # 3 passes over `computed` rows process the b x t_len padded tokens
        work.append(
            limit_row(
                f"train: one micro-batch ({shape}, prefix {prefix})", precision, t, b * t_len, 3, lim, weights, bw
            )
        )
        progress(work[-1])
    backend = HFBackend(model, tok, batch_size=16)
    sampling = SamplingConfig(max_tokens=64, min_tokens=0, n=4, seed=0)
    bf16_backend = HFBackend(model, tok, batch_size=16, bf16=True)
    profile = {
        "generate: GRPO rollouts (4 x 4)": where_time_goes(
            lambda: backend.generate(prompts[:4], sampling, progress=False)
        ),
        "generate: GRPO rollouts (4 x 4), bf16 weights": where_time_goes(
            lambda: bf16_backend.generate(prompts[:4], sampling, progress=False)
        ),
        f"train: one micro-batch ({shape}), 4 times (a warm-up, 3 timed)": where_time_goes(
            lambda: training(model, batch, False)
        ),
    }
    res = {
        **header,
        "cpu": f"{cpu_model()} ({', '.join(sorted(f for f in cpu_flags() if f.startswith(('avx', 'amx'))))})",
        "gemm": gemm,
        "bandwidth_gb_s": bw / 1e9,
        "weights_gb": weights / 1e9,
        "work": work,
        "logprob_gap": gaps,
        "profile": profile,
    }
    write_results(a.out, res, report)


if __name__ == "__main__":
    main()
