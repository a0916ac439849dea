"""SFT training throughput on the embedded model, related to this CPU's measured matmul rate (MFU).

Measures, in one process: (1) the fp32 (and bf16) matmul rate of a square GEMM, (2) tokens/s of
`a5core.rl.sft.sft_step` + optimizer step on r1_zero-formatted synthetic traces. MFU counts 6 * params FLOPs
per *sequence* token (prompt + response, what a plain forward/backward would process) against the fp32
GEMM rate; with the shared prompt prefix the loop does less work than that, which is why "effective" MFU
can exceed what the raw kernels achieve.

    python bench/sft_throughput.py --model models/base --out reports/bench_sft
"""

import argparse
import json
import time

import torch

from a5core.config.sections import DataConfig
from a5core.data.prepare import prepare
from a5core.model.compute import Compute
from a5core.model.loading import load_policy
from a5core.model.optim import make_optimizer
from a5core.model.tokenization import pad_token_id
from a5core.rl.sft import SFTConfig, encode_examples, sft_step


def gemm_rate(dtype: torch.dtype, n: int = 1024, reps: int = 10) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--micro-batch-size", type=int, default=16)
    ap.add_argument("--out", default="reports/bench_sft")
    a = ap.parse_args()
    torch.manual_seed(0)
    model, tok = load_policy(a.model)
    rows = prepare(DataConfig(n_train=1, n_validation=1, n_sft=a.batch_size * (a.steps + 1)))[0]["sft"]
    ex = encode_examples(tok, rows)
    cfg = SFTConfig(batch_size=a.batch_size, micro_batch_size=a.micro_batch_size)
    opt = make_optimizer(model, 1e-5)
    n_params = sum(p.numel() for p in model.parameters())
    fp32 = gemm_rate(torch.float32)
    bf16 = gemm_rate(torch.bfloat16)
    # step 0 warms up; steps 1.. are timed
    seq_tokens, t0 = 0, None
    for s in range(a.steps + 1):
        if s == 1:
            t0 = time.perf_counter()
        batch = ex[s * a.batch_size : (s + 1) * a.batch_size]
        sft_step(model, batch, cfg, pad_token_id(tok), torch.device("cpu"), compute=Compute())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s >= 1:
            seq_tokens += sum(len(p) + len(o) for p, o in batch)
    dt = time.perf_counter() - t0
    tps = seq_tokens / dt
    res = {
        "model": a.model,
        "params": n_params,
        "threads": torch.get_num_threads(),
        "batch_size": a.batch_size,
        "micro_batch_size": a.micro_batch_size,
        "timed_steps": a.steps,
        "sequence_tokens_per_s": tps,
        "gemm_fp32_gflops": fp32 / 1e9,
        "gemm_bf16_gflops": bf16 / 1e9,
        "model_flops_per_s": 6 * n_params * tps,
        "mfu_vs_fp32_gemm": 6 * n_params * tps / fp32,
    }
    with open(f"{a.out}.json", "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
