"""What changing the seed derivation (a5core/base/seeds.py, issue #25) did to the default DAG's SFT result.

    python -m bench.seed_check validate --model models/sft_filtered --model OTHER_FOLDER --seeds 4
    python -m bench.seed_check old-order -- <stages/sft.py arguments, outputs outside the workspace>

- `validate`: each model folder's validation accuracy under `--seeds` validation seeds (0..N-1) with this code,
  the params' `validation` section otherwise: how much of a difference is the validation draw.
- `old-order`: stage sft with this code but the example order of before derive_seed (`seed + epoch`), to compare
  its weights byte for byte with the previous commit's (the previous folder can be rebuilt from DVC's cache).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time


def validate(models: list[str], seeds: int) -> dict:
    import torch

    from a5core.config.sections import EvalConfig, load_section
    from a5core.generation.hf import HFBackend
    from a5core.grader.pool import GraderPool
    from a5core.model.loading import load_policy
    from a5core.model.microbatch import Cut
    from a5core.run.evaluation import evaluate_policy
    from a5core.stage import entry

    cfg = load_section(EvalConfig, "validation", "params.yaml")
    rows = entry.rows("data/prepared/validation.parquet", ["unique_id", "problem", "answer"])
    out: dict = {}
    with GraderPool(cfg.reward_fn, 1, cfg.grader_timeout_s) as pool:
        for path in models:
            policy, tok = load_policy(path, torch.device("cpu"), "float32")
            backend = HFBackend(policy, tok, batch_size=64)
            for seed in range(seeds):
                t0 = time.time()
                ev = evaluate_policy(
                    policy, tok, backend, rows, dataclasses.replace(cfg, seed=seed), pool, False, cut=Cut()
                )
                out[f"{path} seed {seed}"] = ev.metrics["eval/accuracy"]
                print(path, seed, ev.metrics["eval/accuracy"], f"{time.time() - t0:.0f} s", flush=True)
    return out


def old_order(stage_args: list[str]) -> None:
    import a5core.rl.sft as sft_mod

    sft_mod.derive_seed = lambda seed, name, epoch: seed + epoch  # the order formula before derive_seed
    sys.argv = ["stages/sft.py", *stage_args]
    sys.path.insert(0, "stages")
    import sft  # stages/sft.py

    sft.entry.run(sft.main)


if __name__ == "__main__":  # grader workers re-import this file: nothing may run on import
    if sys.argv[1:2] == ["validate"]:
        args = sys.argv[2:]
        models = [args[i + 1] for i, a in enumerate(args) if a == "--model"]
        seeds = int(args[args.index("--seeds") + 1]) if "--seeds" in args else 4
        print(json.dumps(validate(models, seeds), indent=1))
    elif sys.argv[1:2] == ["old-order"]:
        old_order([a for a in sys.argv[2:] if a != "--"])
    else:
        sys.exit(__doc__)
