"""How much of a LoRA update survives the bf16 weight sync (issue 44, item 4).

A run with `model.lora_rank` > 0 and bf16 weights (the full profile) trains float32 adapters; the engine gets the merged
weights W + alpha / r * B A, rounded to bf16 (a5core/model/lora.py). Near the adapters' start B A is tiny, so most
merged weights round back to W: the engine samples from a policy that lags the trainer's. This measures, after
1, 4 and 16 AdamW steps of SFT on the given traces:

- `equal_share`: the share of adapted weights whose merged bf16 value equals the base weight's;
- `update_kept`: |merged bf16 - W| / |alpha / r * B A| over the adapted weights (1: the engine sees the whole update);
- `logprob_gap`: the mean |log p_trainer - log p_engine| over the traces' response tokens, the trainer the PEFT model
  (bf16 base, float32 adapters) and the engine a plain model holding the merged bf16 weights: what `grpo.tis_cap`
  corrects (docs/rl-options.md).

    python -m bench.lora_sync --model models/base --data data/prepared/sft.parquet --out reports/lora_sync.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

from a5core.model import lora
from a5core.model.compute import Compute
from a5core.model.loading import load_policy
from a5core.model.logprobs import get_response_log_probs
from a5core.model.optim import make_optimizer, make_schedule
from a5core.model.tokenization import pad_token_id, tokenize_ids
from a5core.rl.sft import SFTConfig, encode_examples, optimizer_step


@torch.no_grad()
def measure(policy, base: dict[str, torch.Tensor], engine, batch: dict) -> dict:
    """The three numbers above for the policy as it is now; `engine` gets the merged weights loaded into it."""
    merged = lora.merged_state_dict(policy)
    equal = total = 0
    kept_num = kept_den = 0.0
    for name, w in base.items():
        m = merged[name]
        delta = _delta(policy, name)  # float32 alpha / r * B A
        equal += int((m == w).sum())
        total += w.numel()
        kept_num += float((m.float() - w.float()).norm())
        kept_den += float(delta.norm())
    engine.load_state_dict(merged)
    mask = batch["response_mask"].bool()
    ours = get_response_log_probs(policy, batch["input_ids"], batch["labels"])["log_probs"]  # (B, T)
    theirs = get_response_log_probs(engine, batch["input_ids"], batch["labels"])["log_probs"]  # (B, T)
    return {
        "equal_share": equal / total,
        "update_kept": kept_num / max(kept_den, 1e-30),
        "logprob_gap": float((ours - theirs)[mask].abs().mean()),
    }


def _delta(policy, name: str) -> torch.Tensor:
    module = policy.get_base_model().get_submodule(name.removesuffix(".weight"))
    return module.get_delta_weight("default").float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/base")
    ap.add_argument("--data", default="data/prepared/sft.parquet")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--examples", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("reports/lora_sync.json"))
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    plain, tok = load_policy(a.model, "cpu", "bfloat16")
    engine = copy.deepcopy(plain).eval()
    policy = lora.attach(plain, a.rank, a.alpha, lora.DEFAULT_TARGETS)
    base = {
        n: t.clone()
        for n, t in lora.merged_state_dict(policy).items()
        if any(f".{t}." in n for t in lora.DEFAULT_TARGETS)
    }
    rows = pq.read_table(a.data).to_pylist()[: a.examples]
    examples = encode_examples(tok, rows)
    batch = tokenize_ids([p for p, _ in examples], [o for _, o in examples], pad_token_id(tok))
    cfg = SFTConfig(batch_size=len(examples), micro_batch_size=2, lr=a.lr)
    opt = make_optimizer(policy, a.lr)
    sched = make_schedule(opt, 16, 0, "constant")
    out = {"command": " ".join(sys.argv), "model": a.model, "rank": a.rank, "alpha": a.alpha, "lr": a.lr, "steps": {}}
    t0 = time.monotonic()
    for step in range(1, 17):
        policy.train()
        optimizer_step(policy, opt, sched, examples, cfg, pad_token_id(tok), "cpu", compute=Compute())
        if step in (1, 4, 16):
            policy.eval()
            out["steps"][step] = measure(policy, base, engine, batch)
            print(f"step {step}: {json.dumps(out['steps'][step])}", flush=True)
    out["seconds"] = time.monotonic() - t0
    a.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
