"""How much of each AdamW step bf16 weights keep: `python bench/precision.py [--lrs 1e-5] [--steps 20] [--out F]`.

A random Qwen2-shaped decoder (3.3 M parameters, init std 0.02, RMSNorm weights 1.0) is first trained in float32
at lr 1e-3 for `--warm-steps` steps on synthetic math traces (so that it is a trained model, not an initialization),
then fine-tuned for `--steps` AdamW steps (betas 0.9/0.95, no weight decay, no clipping, constant lr) on one fixed
batch of other traces, from the same start, by each precision:
- float32: float32 weights, float32 compute, torch AdamW (the reference);
- float32 + bf16 autocast: float32 master weights and moments, bf16 matmuls (`model.dtype: float32` on GPU);
- bf16 nearest: bf16 weights and moments, torch AdamW (`model.weight_update: nearest`);
- bf16 stochastic_round: torchao's AdamW with bf16 stochastic rounding (`stochastic_round`);
- bf16 kahan: a5core.model.optim.KahanAdamW (`kahan`).
Reported per precision: the share of weights a step changes (all, and the RMSNorm weights alone), the loss on the
batch after the steps (a float32 forward of the final weights, so it compares weights, not forward precision), and
the update's error against float32's, |dw - dw_fp32| / |dw_fp32| (dw: final minus start weights, all parameters).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from a5core.model.optim import make_optimizer  # noqa: E402

BETAS = (0.9, 0.95)  # the handout's GRPO betas
METHODS = {  # name: (weight dtype, bf16 autocast, model.weight_update)
    "float32": (torch.float32, False, "nearest"),
    "float32 + bf16 autocast": (torch.float32, True, "nearest"),
    "bf16 nearest": (torch.bfloat16, False, "nearest"),
    "bf16 stochastic_round": (torch.bfloat16, False, "stochastic_round"),
    "bf16 kahan": (torch.bfloat16, False, "kahan"),
}


def build(seed: int = 0):
    """(random Qwen2-shaped model in float32, tokenizer): 4 layers, hidden 256, GQA 4/2 heads, SwiGLU 768."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from a5core.model.loading import build_tiny_model

    _, tokenizer = build_tiny_model(seed)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.02,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).eval(), tokenizer


def batches(tokenizer, n: int, size: int, seq: int, seed: int) -> list[torch.Tensor]:
    """`n` batches of `size` synthetic r1_zero traces, truncated/padded (with EOS) to `seq` tokens."""
    from a5core.config.prompts import R1_ZERO
    from a5core.data.synthetic import generate

    rows = generate(10, 10, n * size, 0.3, seed)["sft"][: n * size]
    texts = [R1_ZERO.format(question=r["problem"]) + r["response"] for r in rows]
    eos = tokenizer.eos_token_id
    ids = [(tokenizer.encode(t, add_special_tokens=False) + [eos] * seq)[:seq] for t in texts]
    out = torch.tensor(ids)
    return [out[i * size : (i + 1) * size] for i in range(n)]


def loss_of(model, batch: torch.Tensor, autocast: bool = False) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model(input_ids=batch, labels=batch).loss.float()


def warm_up(model, data: list[torch.Tensor], lr: float) -> float:
    """Train in float32 on `data` (one step per batch); returns the last loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=0.0)
    for batch in data:
        loss = loss_of(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def run(start, batch: torch.Tensor, method: str, lr: float, steps: int, seed: int) -> dict:
    """Fine-tune a copy of `start` with `method`; the per-step change shares, final weights, final loss, seconds."""
    dtype, autocast, update = METHODS[method]
    model = copy.deepcopy(start).to(dtype)
    w0 = torch.cat([p.detach().float().flatten() for p in model.parameters()])  # the start in this dtype
    torch.manual_seed(seed)  # stochastic rounding draws from the global generator
    opt = make_optimizer(model, lr, 0.0, BETAS, update=update)
    names = [n for n, _ in model.named_parameters()]
    norms = [i for i, n in enumerate(names) if "norm" in n]
    changed, changed_norm, t0 = [], [], time.monotonic()
    for _ in range(steps):
        before = [p.detach().clone() for p in model.parameters()]
        loss_of(model, batch, autocast).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        diff = [(p.detach() != b) for p, b in zip(model.parameters(), before)]
        changed.append(sum(int(d.sum()) for d in diff) / sum(d.numel() for d in diff))
        changed_norm.append(sum(int(diff[i].sum()) for i in norms) / sum(diff[i].numel() for i in norms))
    seconds = time.monotonic() - t0
    final = copy.deepcopy(model).float()
    with torch.no_grad():
        loss = float(loss_of(final, batch))
    update = torch.cat([p.detach().flatten() for p in final.parameters()]) - w0
    return {"changed": changed, "changed_norm": changed_norm, "update": update, "loss": loss, "seconds": seconds}


def measure(model, batch: torch.Tensor, lr: float, steps: int, seed: int = 0) -> dict:
    """Every method at one learning rate, from the same (warmed-up) model."""
    with torch.no_grad():
        start_loss = float(loss_of(model, batch))
    results = {m: run(model, batch, m, lr, steps, seed) for m in METHODS}
    ref = results["float32"]["update"]
    rows = {}
    for method, r in results.items():
        dw = r["update"]
        rows[method] = {
            "changed_per_step": sum(r["changed"]) / steps,
            "norm_changed_per_step": sum(r["changed_norm"]) / steps,
            "loss": r["loss"],
            "loss_drop": start_loss - r["loss"],
            "loss_drop_vs_float32": (start_loss - r["loss"]) / (start_loss - results["float32"]["loss"]),
            "update_error": float((dw - ref).norm() / ref.norm()),
            "seconds": r["seconds"],
        }
    return {"lr": lr, "steps": steps, "parameters": ref.numel(), "start_loss": start_loss, "methods": rows}


def table(results: list[dict]) -> str:
    lines = [
        "| lr | precision | weights changed per step | RMSNorm weights changed per step | loss after | loss drop "
        "| loss drop / float32's | update error vs float32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        for method, r in res["methods"].items():
            lines.append(
                f"| {res['lr']:g} | {method} | {r['changed_per_step']:.1%} | {r['norm_changed_per_step']:.1%} "
                f"| {r['loss']:.4f} | {r['loss_drop']:.4f} | {r['loss_drop_vs_float32']:.2f} "
                f"| {r['update_error']:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-5])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warm-steps", type=int, default=200)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a shared machine; the numbers do not depend on it
    model, tokenizer = build(0)
    data = batches(tokenizer, args.warm_steps + 1, 8, 128, 0)
    warm_loss = warm_up(model, data[:-1], 1e-3)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters; warm-up loss {warm_loss:.4f}")
    results = [measure(model, data[-1], lr, args.steps) for lr in args.lrs]
    for res in results:
        print(f"lr {res['lr']:g}: batch loss at the start {res['start_loss']:.4f}, {res['steps']} steps")
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
