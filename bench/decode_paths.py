"""Is the hf backend's decode step bound by its products or by what runs between them? Tried on this CPU (issue 65).

    python bench/decode_paths.py --model models/base --out reports/decode_paths        # after `dvc repro fetch_model`

The same work on every path: `--rows` sequences (default 16, the default profile's GRPO rollouts) of one synthetic
prompt each, the prompt prefilled once, then `--tokens` decode steps with every row alive (greedy: the sampling's
cost is under 2% in reports/roofline.md's profile), float32, one process:

1. `dynamic cache, eager`: the backend's own way (a5core/generation/hf.py): transformers' DynamicCache, which grows by
   `cat` at every step, and the attention mask grown by one column per step.
2. `static cache, eager`: transformers' StaticCache, preallocated for prompt + tokens (no `cat`), the mask written in
   place.
3. `static cache, compiled`: path 2's decode step through `torch.compile` (inductor, fixed shapes; its first call,
   the compilation, timed apart).
4. `products alone`: every `nn.Linear` of the model (the LM head included) applied once, in forward order, to a
   `rows`-row input: the products of one decode step with the weights streamed from memory as a decode step streams
   them, and nothing else. Also one of them (up_proj) repeated with its weights in cache, as bench/roofline.py times
   products.

Each path's greedy tokens are compared with path 1's, and its last logits (max abs difference). Writes <out>.json and
<out>.md. Run it on a quiet machine; every ratio is within this one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import StaticCache

from a5core.config.prompts import build_prompt
from a5core.data.synthetic import generate as synthetic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.roofline
from bench.roofline import bench_model, median_s, write_results  # noqa: E402


@torch.inference_mode()
def dynamic_eager(model, ids: torch.Tensor, tokens: int):
    """Path 1: the growing cache and mask, as the hf backend decodes. -> (tokens (b, T), last logits (b, V))."""
    b, p = ids.shape
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache, mask, picked = out.past_key_values, torch.ones(b, p, dtype=torch.long), []
    for t in range(tokens):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # (b, 1)
        picked.append(nxt)
        mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long)], dim=1)  # (b, p+t+1)
        pos = torch.full((b, 1), p + t)  # (b, 1)
        out = model(input_ids=nxt, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                    logits_to_keep=1)  # fmt: skip
    return torch.cat(picked, dim=1), out.logits[:, -1]


class StaticDecode:
    """Paths 2 and 3: a preallocated cache for prompt + `tokens`; `step` eager or compiled."""

    def __init__(self, model, length: int, compiled: bool):
        self.model, self.length = model, length
        self.cache = StaticCache(config=model.config, max_cache_len=length)
        self.step = torch.compile(self._step, dynamic=False) if compiled else self._step

    def _step(self, nxt, pos, cache_pos, mask):
        return self.model(input_ids=nxt, attention_mask=mask, position_ids=pos, cache_position=cache_pos,
                          past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits  # fmt: skip

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, tokens: int):
        """-> (tokens (b, T), last logits (b, V)), as `dynamic_eager`."""
        b, p = ids.shape
        self.cache.reset()
        mask = torch.zeros(b, self.length, dtype=torch.long)  # (b, L): columns switched on as the cache fills
        mask[:, :p] = 1
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(p).expand(b, p),
                            cache_position=torch.arange(p), past_key_values=self.cache, use_cache=True,
                            logits_to_keep=1).logits  # fmt: skip
        picked = []
        for t in range(tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # (b, 1)
            picked.append(nxt)
            mask[:, p + t] = 1
            logits = self.step(nxt, torch.full((b, 1), p + t), torch.tensor([p + t]), mask)  # (b, 1, V)
        return torch.cat(picked, dim=1), logits[:, -1]


def products_alone(model, rows: int, reps: int) -> dict:
    """Path 4: one decode step's products, weights streamed in forward order; and up_proj's with its weights in
    cache."""
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if model.config.tie_word_embeddings and not any(w is model.get_input_embeddings().weight for w in linears):
        linears.append(model.get_input_embeddings().weight)  # a tied LM head is the embedding's matrix
    xs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in linears}
    flops = sum(2 * rows * w.numel() for w in linears)

    @torch.inference_mode()
    def one_pass():
        for w in linears:
            torch.nn.functional.linear(xs[w.shape[1]], w)

    streamed, _ = median_s(one_pass, 3 * reps)
    up = model.model.layers[0].mlp.up_proj.weight
    x = torch.randn(rows, up.shape[1])
    with torch.inference_mode():
        hot, _ = median_s(lambda: [torch.nn.functional.linear(x, up) for _ in range(20)], 3 * reps)
    return {"step_s": streamed, "gflops": flops / streamed / 1e9, "in_cache_gflops": 20 * 2 * x.shape[0] *
            up.numel() / hot / 1e9, "tokens_per_s": rows / streamed}  # fmt: skip


def measure(model, ids: torch.Tensor, tokens: int, reps: int) -> dict:
    """Every path on the same work: tokens/s, ratio to path 1, agreement with path 1."""
    rows, length = ids.shape[0], ids.shape[1] + tokens
    eager, compiled = StaticDecode(model, length, compiled=False), StaticDecode(model, length, compiled=True)
    paths = {
        "dynamic cache, eager": median_s(lambda: dynamic_eager(model, ids, tokens), reps),
        "static cache, eager": median_s(lambda: eager(ids, tokens), reps),
    }
    t = time.perf_counter()
    compiled(ids, tokens)  # its compilation, timed apart
    first = {"static cache, compiled": time.perf_counter() - t}
    paths["static cache, compiled"] = median_s(lambda: compiled(ids, tokens), reps)
    ref_s, (ref_tokens, ref_logits) = paths["dynamic cache, eager"]
    out = {}
    for name, (seconds, (toks, logits)) in paths.items():
        out[name] = {
            "seconds": seconds,
            "tokens_per_s": rows * tokens / seconds,
            "speed_vs_dynamic_eager": ref_s / seconds,
            "same_tokens": bool(torch.equal(toks, ref_tokens)),
            "max_abs_logit_diff": (logits - ref_logits).abs().max().item(),
            **({"first_call_s": first[name]} if name in first else {}),
        }
    return out


def report(res: dict) -> str:
    lines = [
        "# The hf backend's decode step: products or overhead? (bench/decode_paths.py)",
        "",
        f"    {res['command']}",
        "",
        f"{res['cpu']}, {res['threads']} threads, torch {res['torch']}, {res['model']} ({res['params'] / 1e6:.0f}M "
        f"parameters, float32). {res['rows']} rows x {res['tokens']} decode steps after a {res['prompt_tokens']}-token "
        f"prompt, greedy, every row alive; median of {res['reps']} after a warm-up (the products alone: of "
        f"{3 * res['reps']}). One run; every ratio is within it.",
        "",
        "| path | seconds | tokens/s | speed vs the backend's path | same tokens | max abs logit diff |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, p in res["paths"].items():
        lines.append(f"| {name} | {p['seconds']:.2f} | {p['tokens_per_s']:.0f} | {p['speed_vs_dynamic_eager']:.2f}x | "
                     f"{'yes' if p['same_tokens'] else 'no'} | {p['max_abs_logit_diff']:.1e} |")  # fmt: skip
    comp, prod = res["paths"]["static cache, compiled"], res["products"]
    ref = res["paths"]["dynamic cache, eager"]
    lines += [
        "",
        f"The compiled path's first call (compilation included) took {comp['first_call_s']:.1f} s.",
        "",
        f"**The products alone** (every linear layer once, weights streamed in forward order, nothing else): "
        f"{prod['step_s'] * 1e3:.0f} ms per decode step, {prod['gflops']:.0f} GFLOP/s, {prod['tokens_per_s']:.0f} "
        f"tokens/s; one product repeated with its weights in cache: {prod['in_cache_gflops']:.0f} GFLOP/s. The "
        f"backend's path reaches {ref['tokens_per_s'] / prod['tokens_per_s']:.2f} of the products-alone rate.",
        "",
        _reading(comp["speed_vs_dynamic_eager"]),
    ]
    return "\n".join(lines) + "\n"


def _reading(compiled_speed: float) -> str:
    """What the compiled path's speed says about the time between operators."""
    if compiled_speed < 1.1:
        return (
            "Compiling the decode step (no Python between operators, fused elementwise work, no cache `cat`) made it "
            f"{compiled_speed:.2f}x the backend's speed: what separates the backend from the products-alone rate is "
            "not the framework between operators. A faster path needs faster products (bf16 weights, for one), not a "
            "compiled step."
        )
    return (
        f"Compiling the decode step made it {compiled_speed:.2f}x faster than the backend's path: the framework "
        "between operators costs that much here."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--out", default="reports/decode_paths")
    ap.add_argument("--rows", type=int, default=16, help="sequences decoded together (the GRPO rollouts: 16)")
    ap.add_argument("--tokens", type=int, default=64, help="decode steps (max_tokens: 64)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model (checks the bench)")
    a = ap.parse_args()
    model, tok, header = bench_model(a, "decode_paths.py")
    prompt = build_prompt(synthetic(10, 64, 10, 0.3, seed=123)["validation"][0]["problem"])
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]] * a.rows)  # (rows, P)
    res = {
        **header,
        "rows": a.rows,
        "tokens": a.tokens,
        "prompt_tokens": ids.shape[1],
        "reps": a.reps,
        "products": products_alone(model, a.rows, a.reps),  # first, before any decode path has run
        "paths": measure(model, ids, a.tokens, a.reps),
    }
    write_results(a.out, res, report)


if __name__ == "__main__":
    main()
