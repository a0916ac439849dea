"""Does keeping the LM head in float32 close the bf16 copy's log-prob gap? Tried on this CPU (issues 65 and 57).

    python bench/bf16_head.py --model models/base --out reports/bf16_head        # after `dvc repro fetch_model`

The hf backend's bf16 generation (`generation.dtype: bfloat16`, a5core/generation/hf.py `own_copy`) samples from a
bf16 copy of the float32 policy; GRPO trained on those rollouts lost its gain (reports/grpo_sweep.md#bf16-generation),
the copy's sampled tokens being 0.038 nats per token off the float32 policy's log-probs (reports/roofline.md).
MiniMax-M1 (arXiv 2506.13585, on the precision mismatch between its training and inference kernels) traced such a
gap to the LM head and computed the head in float32. Three generators on the same work (the default profile's GRPO
rollouts, 4 questions x 4 samples, and a validation batch, 32 x 2; 64 tokens at most, the default sampling, seed 0):

1. `float32`: the backend generating from the policy itself.
2. `bf16 copy`: the backend's bf16 copy, as `generation.dtype: bfloat16` makes it.
3. `bf16 copy, float32 head`: the same copy with its LM head untied and kept in float32 (its input cast up), synced
   from the policy as the backend syncs the rest.

For each: tokens/s (median of `--reps` after a warm-up) and the sampled tokens' log-probs as generation gave them
against the float32 model's over the same tokens (what training computes). Writes <out>.json and <out>.md. One run;
every ratio is within it. Nothing here changes the backend: this measures whether the change is worth making.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from a5core.config.prompts import build_prompt
from a5core.config.sections import SamplingConfig
from a5core.data.synthetic import generate as synthetic
from a5core.generation import HFBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.roofline
from bench.roofline import bench_model, logprob_gap, median_s, sampled_tokens, write_results  # noqa: E402

GENERATORS = ("float32", "bf16 copy", "bf16 copy, float32 head")
WORK = {"GRPO rollouts (4 x 4)": (4, 4), "validation batch (32 x 2)": (32, 2)}


def generator(model, tok, name: str, rows: int) -> HFBackend:
    """The backend for `name`, synced from `model` (float32)."""
    backend = HFBackend(model, tok, batch_size=rows, bf16=name != "float32")
    backend.sync_weights(model)
    if name == "bf16 copy, float32 head":
        head = backend.own.get_output_embeddings()
        head.weight = torch.nn.Parameter(model.get_output_embeddings().weight.detach().float().clone(), False)
        head.register_forward_pre_hook(lambda _module, args: (args[0].float(),))  # (b, t, d): bf16 -> float32
        backend.sync_weights(model)  # as at every sync: the head's entry now lands in float32
        assert head.weight.dtype == torch.float32 and head.weight is not backend.own.get_input_embeddings().weight
    return backend


def measure(model, tok, prompts: list[str], reps: int) -> dict:
    """{work: {generator: tokens/s and the log-prob gap}}."""
    out = {}
    for work, (questions, n) in WORK.items():
        asked, sampling = prompts[:questions], SamplingConfig(max_tokens=64, min_tokens=0, n=n, seed=0)
        out[work] = {}
        for name in GENERATORS:
            backend = generator(model, tok, name, questions * n)
            seconds, done = median_s(lambda b=backend, a=asked, s=sampling: b.generate(a, s, progress=False), reps)
            tokens = sum(len(c.token_ids) for cs in done for c in cs)
            out[work][name] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                               **logprob_gap(model, tok, sampled_tokens(asked, done))}  # fmt: skip
            print(work, name, {k: round(v, 4) for k, v in out[work][name].items()}, flush=True)
        for r in out[work].values():
            r["speed_vs_float32"] = r["tokens_per_s"] / out[work]["float32"]["tokens_per_s"]
    return out


def report(res: dict) -> str:
    lines = [
        "# bf16 generation with the LM head in float32 (bench/bf16_head.py)",
        "",
        f"    {res['command']}",
        "",
        f"{res['cpu']}, {res['threads']} threads, torch {res['torch']}, {res['model']} ({res['params'] / 1e6:.0f}M "
        f"parameters, float32). Median of {res['reps']} after a warm-up. |Δ|: the sampled tokens' log-probs as "
        "generated against the float32 model's, in nats per token. One run; every ratio is within it.",
        "",
        "| work | generator | tokens/s | speed vs float32 | tokens | mean abs Δ | max abs Δ | share with abs Δ > 0.1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for work, rows in res["work"].items():
        for name, r in rows.items():
            lines.append(f"| {work} | {name} | {r['tokens_per_s']:.0f} | {r['speed_vs_float32']:.2f}x | {r['tokens']} "
                         f"| {r['mean_abs']:.2g} | {r['max_abs']:.2g} | {r['over_0.1']:.3f} |")  # fmt: skip
    grpo = res["work"]["GRPO rollouts (4 x 4)"]
    copy, head = grpo["bf16 copy"], grpo["bf16 copy, float32 head"]
    lines += [
        "",
        f"On the GRPO rollouts the float32 head takes the mean gap from {copy['mean_abs']:.3g} to "
        f"{head['mean_abs']:.3g} nats per token ({1 - head['mean_abs'] / copy['mean_abs']:.0%} less) and the share "
        f"of tokens off by more than 0.1 from {copy['over_0.1']:.3f} to {head['over_0.1']:.3f}, at "
        f"{head['speed_vs_float32']:.2f}x float32's speed against the copy's {copy['speed_vs_float32']:.2f}x. What "
        "remains comes from the bf16 body. Whether GRPO keeps its gain on such rollouts is a training run, not this "
        "bench.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--out", default="reports/bf16_head")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model (checks the bench)")
    a = ap.parse_args()
    model, tok, header = bench_model(a, "bf16_head.py")
    prompts = [build_prompt(r["problem"]) for r in synthetic(10, 64, 10, 0.3, seed=123)["validation"]]
    res = {**header, "reps": a.reps, "work": measure(model, tok, prompts, a.reps)}
    write_results(a.out, res, report)


if __name__ == "__main__":
    main()
