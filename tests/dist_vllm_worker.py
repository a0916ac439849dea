"""One side of tests/test_distributed_vllm.py: a vLLM engine (the CPU build) synced from a policy after an optimizer
step, as one plain process or as 2 fsdp2 ranks under torchrun, each rank with its own engine (external_launcher).
Every rank saves what the test compares (`<out>.rank<r>`).

    python tests/dist_vllm_worker.py --model FOLDER --out single.pt
    python -m torch.distributed.run --nproc-per-node 2 tests/dist_vllm_worker.py --model FOLDER --out fsdp2.pt
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch

from a5core.config.prompts import build_prompt
from a5core.config.sections import GenerationConfig, SamplingConfig
from a5core.generation.vllm import VLLMBackend, WeightSyncError
from a5core.model import distributed
from a5core.model.distributed import DistributedConfig
from a5core.model.loading import load_policy
from a5core.model.logprobs import get_response_log_probs
from a5core.model.microbatch import Cut

PROMPTS = [build_prompt("Compute 1 + 2."), build_prompt("What is 7 * 8?")]


def step(policy, world: int) -> torch.optim.Optimizer:
    """One AdamW step on a fixed batch, each rank's loss its 1/world share (fsdp2 sums the ranks' gradients)."""
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    ids = torch.arange(3, 40).reshape(1, -1)  # (1, 37)
    (policy(input_ids=ids, labels=ids).loss / world).backward()
    opt.step()
    return opt


def stale_check(backend, start) -> str:
    """The exact check against the weights before the step: it must fail (the engine holds the new ones)."""
    try:
        backend.verify_exact(list(start.state_dict().items()))
    except WeightSyncError as e:
        return str(e)
    return ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed.setup(DistributedConfig(nproc=world, strategy="fsdp2"))
    policy, tok = load_policy(args.model, torch.device("cpu"), "float32")
    start = copy.deepcopy(policy)
    policy = distributed.shard(policy.train(), "fsdp2", streamed=True)
    backend = distributed.FullWeightsBackend(
        VLLMBackend(
            args.model, GenerationConfig(backend="vllm", sync_tolerance=1e-4), tokenizer=tok, policy=policy, cut=Cut()
        )
    )
    backend.sync_weights(policy)  # a stage's initial validation: the probe's forwards, then the rollouts' entropies
    ids = torch.arange(3, 20).reshape(1, -1)  # (1, 17)
    with distributed.inference(policy):  # the LM head 4 positions at a time (as the full profile's logits_chunk)
        cut = Cut(logits_chunk=4)
        get_response_log_probs(policy, ids[:, :-1], ids[:, 1:], return_token_entropy=True, share_prefix=True, cut=cut)
    opt = step(policy, world)
    began = time.perf_counter()
    backend.sync_weights(policy)  # reload, exact check and log-prob probe (verify_weight_sync defaults to true)
    sync_s = time.perf_counter() - began
    greedy = backend.generate(PROMPTS, SamplingConfig(temperature=0.0, max_tokens=12, min_tokens=12, stop=()), False)
    saved = distributed.full_weights(policy)  # what save_model and the Checkpointer write from (rank 0 only)
    moments = distributed.optimizer_state(policy, opt).get("state", {})  # rank 0 only: a checkpoint after a sync
    out = {
        "world": world,
        "rank": distributed.world().rank,
        "sync_s": sync_s,
        "greedy": [c[0].token_ids for c in greedy],
        "stale": stale_check(backend, start),
        "saved": None if saved is None else {n: t.detach().clone() for n, t in saved.state_dict().items()},
        "saved_device": None if saved is None else str(next(saved.parameters()).device),
        "whole_copy": vars(policy).get("a5_full") is not None,
        "moments": {k: v["exp_avg"].clone() for k, v in moments.items()},
    }
    torch.save(out, f"{args.out}.rank{out['rank']}")
    distributed.leave()


if __name__ == "__main__":
    main()
