"""Generation throughput of the hf backend vs the same model's plain one-prompt-at-a-time `generate`.

Both run in the same process on the same prompts (r1_zero, synthetic validation problems) with the same
sampling (temperature 1, top-p 1, stop at </answer>, max/min tokens below), so the ratio is robust to a
shared, noisy machine. Writes a Markdown + JSON report.

    python bench/generation_throughput.py --model models/base --out reports/bench_generation
"""

import argparse
import json
import platform
import time

import torch

from a5core.config.prompts import build_prompt
from a5core.config.sections import SamplingConfig
from a5core.data.synthetic import generate
from a5core.generation import HFBackend
from a5core.model.loading import load_policy


def plain_generate(model, tok, prompts, sampling) -> int:
    """The reference: one prompt at a time through transformers' generate; returns new tokens produced."""
    n = 0
    for p in prompts:
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=sampling.max_tokens,
            min_new_tokens=sampling.min_tokens,
            stop_strings=["</answer>"],
            tokenizer=tok,
            pad_token_id=tok.pad_token_id or tok.eos_token_id,
        )
        n += out.shape[1] - ids.shape[1]
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--reference-prompts", type=int, default=8, help="the slow reference runs on this many")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default="reports/bench_generation")
    a = ap.parse_args()
    torch.manual_seed(0)
    model, tok = load_policy(a.model)
    model.eval()
    rows = generate(10, a.prompts, 10, 0.3, seed=123)["validation"]
    prompts = [build_prompt(r["problem"]) for r in rows]
    sampling = SamplingConfig(max_tokens=a.max_tokens, min_tokens=4)
    with torch.inference_mode():
        t = time.perf_counter()
        ref_tokens = plain_generate(model, tok, prompts[: a.reference_prompts], sampling)
        ref_s = time.perf_counter() - t
        t = time.perf_counter()
        out = HFBackend(model, tok, batch_size=a.batch_size).generate(prompts, sampling, progress=False)
        ours_s = time.perf_counter() - t
    ours_tokens = sum(len(c.token_ids) for cs in out for c in cs)
    res = {
        "model": a.model,
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "prompts": a.prompts,
        "reference_prompts": a.reference_prompts,
        "max_tokens": a.max_tokens,
        "batch_size": a.batch_size,
        "reference_tokens_per_s": ref_tokens / ref_s,
        "hf_backend_tokens_per_s": ours_tokens / ours_s,
        "speedup": (ours_tokens / ours_s) / (ref_tokens / ref_s),
    }
    with open(f"{a.out}.json", "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
