"""One side of tests/test_distributed.py: GRPO and SFT optimizer steps (and the gathered old log-probs) on a tiny
model, run as one plain process or under `torchrun --nproc-per-node 2`; rank 0 saves what the test compares.

    python tests/dist_worker.py --out ref.pt
    python -m torch.distributed.run --nproc-per-node 2 tests/dist_worker.py --strategy fsdp2 --out fsdp2.pt
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from a5core.base.records import RolloutBatch
from a5core.model import distributed
from a5core.model.compute import Compute
from a5core.model.distributed import DistributedConfig
from a5core.model.loading import build_tiny_model
from a5core.model.microbatch import Cut
from a5core.model.optim import KahanAdamW, make_optimizer
from a5core.rl.grpo import GRPOConfig
from a5core.rl.grpo_update import old_log_probs_for, optimizer_step
from a5core.rl.losses import LENGTH_NORMALIZERS, PG_LOSSES
from a5core.rl.sft import SFTConfig
from a5core.rl.sft import optimizer_step as sft_optimizer_step
from a5core.run.checkpoint import Checkpointer, UnreadableShards

SFT_ROWS = [
    ("What is 2 + 3?", " 5. </think> <answer>5</answer>"),
    ("Solve x + 1 = 4 for x, showing every step.", " x = 3. </think> <answer>3</answer>"),
    ("7 * 6?", " 42 </think> <answer>42</answer>"),
    ("Compute 5 - 2.", " 3. </think> <answer>3</answer>"),
    ("Compute 100 / 4 and explain.", " 25"),
]


def rollouts(tok, n: int = 6) -> RolloutBatch:
    """n rollouts of very different lengths, nonzero advantages, off-policy old log-probs (some ratios clipped)."""
    g = torch.Generator().manual_seed(0)
    # a common prefix of more than 8 tokens: on one process and under ddp the shared-prefix path runs two forwards
    # for a micro-batch of several rows and one for a single row (fsdp2 turns it off: every forward is a collective)
    head = "Solve the following problem step by step and put the answer in a box. "
    prompts = [tok(f"{head}Q{i}: what is {i} * {i + 3}?", add_special_tokens=False)["input_ids"] for i in range(n)]
    outputs = [torch.randint(5, tok.vocab_size, (1 + (i * 13) % 40,), generator=g).tolist() for i in range(n)]
    batch = RolloutBatch(prompts, outputs, torch.tensor([1.0, 0, 0, 1, 1, 0][:n]), torch.randn(n, generator=g), 0)
    batch.old_log_probs = [-3.0 + 0.3 * torch.randn(len(p) + len(o) - 1, generator=g) for p, o in zip(prompts, outputs)]
    return batch


@dataclass(frozen=True)
class How:
    """What the launch fixed, as a stage passes it: the strategy and the compute settings (float32, handout split)."""

    strategy: str
    compute: Compute = Compute()


def fresh(model, how: How):
    """A copy of the start weights in training mode, sharded under fsdp2."""
    return distributed.shard(copy.deepcopy(model).train(), how.strategy)


def whole(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()  # a DTensor under fsdp2


def grpo_case(model, tok, how: How, loss_type: str, norm: str, k: int, adam: bool, update: str = "") -> dict:
    """One optimizer step: the clipped gradient (captured just before the optimizer uses it) and the new weights.
    With `adam`, the step follows an old-log-prob pass, as in a GRPO step (under fsdp2 a no-grad forward must leave
    buffers the training forward can use); `update`: AdamW with that model.weight_update (a5core/model/optim.py)
    instead of torch's, on bf16 weights for stochastic_round (torchao's AdamW; its rounding draws random numbers)."""
    cfg = GRPOConfig(
        loss_type=loss_type, length_normalization=norm, normalize_constant=40.0, rollout_batch_size=6, group_size=3,
        train_batch_size=6, gradient_accumulation_steps=k, max_grad_norm=1e-3,
    )  # fmt: skip
    m = fresh(copy.deepcopy(model).to(torch.bfloat16) if update == "stochastic_round" else model, how)
    if update:
        opt = KahanAdamW(m.parameters(), lr=1e-3) if update == "kahan" else make_optimizer(m, 1e-3, update=update)
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3) if adam else torch.optim.SGD(m.parameters(), lr=1.0)
    grads: list[torch.Tensor] = []
    step = opt.step
    opt.step = lambda: (grads.extend(whole(p.grad) for p in m.parameters()), step())[1]
    if adam:
        old_log_probs_for(m, rollouts(tok), 2, torch.device("cpu"), how.compute)
    row = optimizer_step(m, opt, cfg, list(range(6)), rollouts(tok), torch.device("cpu"), how.compute)
    return {"grad": torch.cat([g.flatten() for g in grads]), "weights": flat_weights(m), "row": row}


def flat_weights(m) -> torch.Tensor:
    return torch.cat([whole(p).flatten() for p in m.parameters()])


def sft_case(model, tok, how: How, norm: str, micro: int) -> dict:
    """One SFT optimizer step (clip at 1e-3, then SGD at lr 1: the update is the clipped gradient): the gradient
    just before the optimizer uses it, the new weights and the logged row."""
    m = fresh(model, how)
    ex = [
        (tok(p, add_special_tokens=False)["input_ids"], tok(r, add_special_tokens=False)["input_ids"])
        for p, r in SFT_ROWS
    ]
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)  # before the capture below, which it would wrap
    grads: list[torch.Tensor] = []
    step = opt.step
    opt.step = lambda: (grads.extend(whole(p.grad) for p in m.parameters()), step())[1]
    cfg = SFTConfig(batch_size=5, micro_batch_size=micro, loss_normalization=norm, max_grad_norm=1e-3)
    row = sft_optimizer_step(m, opt, sched, ex, cfg, 0, torch.device("cpu"), how.compute)
    return {"grad": torch.cat([g.flatten() for g in grads]), "weights": flat_weights(m), "row": row}


def resume_case(model, tok, how: How, folder: Path, optimizer=torch.optim.AdamW) -> dict:
    """Two AdamW steps straight, and the second again after the first's state went through the Checkpointer (whole
    tensors from one process or ddp; under fsdp2 each rank's shards, in a distributed checkpoint). Then a state cut
    short (its shard file, its state.pt) is not resumed from."""
    cfg = GRPOConfig(rollout_batch_size=6, group_size=3, train_batch_size=6, gradient_accumulation_steps=2)
    batch, cpu = rollouts(tok), torch.device("cpu")
    m = fresh(model, how)
    opt = optimizer(m.parameters(), lr=1e-3)
    optimizer_step(m, opt, cfg, list(range(6)), batch, cpu, compute=Compute())
    Checkpointer(folder, "fp", every=1).save_training(m, opt, 1, [{"step": 1}])
    optimizer_step(m, opt, cfg, list(range(6)), batch, cpu, compute=Compute())
    m2 = fresh(model, how)
    opt2 = optimizer(m2.parameters(), lr=1e-3)
    reads, load = [], torch.load

    def counted(f, *args, **kwargs):  # which ranks open the checkpoint file (unpickling a tensor loads bytes)
        if isinstance(f, (str, os.PathLike)):
            reads.append(distributed.world().rank)
        return load(f, *args, **kwargs)

    torch.load = counted
    try:
        state = Checkpointer(folder, "fp", every=1).restore_training(m2, opt2)
    finally:
        torch.load = load
    optimizer_step(m2, opt2, cfg, list(range(6)), batch, cpu, compute=Compute())
    restored = [(state["step"], state["history"])]
    shards = sorted(p.name for p in (folder / "state" / "dcp").glob("*"))  # fsdp2's distributed checkpoint
    fresh_start, sharded = [], distributed.is_sharded(m)
    for cut in ("dcp/__1_0.distcp", "state.pt") if shards else ("state.pt",):
        Checkpointer(folder, "fp", every=1).save_training(m, opt, 1, [{"step": 1}])
        if distributed.is_main():  # a truncated file: every rank starts afresh (rank 0 alone may have read it)
            (folder / "state" / cut).write_bytes(b"PK\x03\x04")
        distributed.barrier()
        fresh_start.append(Checkpointer(folder, "fp", every=1).load(sharded) is None)
    garbled = []  # a shard file of the right size that does not load: moved aside, the stage stops in one line
    if shards:
        Checkpointer(folder, "fp", every=1).save_training(m, opt, 1, [{"step": 1}])
        if distributed.is_main():
            shard = folder / "state" / "dcp" / "__0_0.distcp"
            shard.write_bytes(bytes(shard.stat().st_size))
        distributed.barrier()
        try:
            Checkpointer(folder, "fp", every=1).restore_training(fresh(model, how), opt2)
        except UnreadableShards as err:
            garbled.append(str(err).split(" could not be loaded")[0].endswith("dcp"))
        distributed.barrier()
        garbled.append(not (folder / "state").exists() and any(folder.glob("state.corrupt-*")))
    return {"straight": flat_weights(m), "resumed": flat_weights(m2), "readers": distributed.gather(reads),
            "restored": distributed.gather(restored), "fresh_start": distributed.gather([fresh_start]),
            "shards": shards, "garbled": distributed.gather([garbled])}  # fmt: skip


def cross_case(model, tok, how: How, write: Path, read: str | None) -> dict:
    """A checkpoint after one AdamW step in this layout (to `write`), and the second step taken after resuming from
    a checkpoint that another layout wrote (`read`): one process keys its optimizer state by index, fsdp2 by name."""
    cfg = GRPOConfig(rollout_batch_size=6, group_size=3, train_batch_size=6, gradient_accumulation_steps=2)
    batch, cpu = rollouts(tok), torch.device("cpu")
    m = fresh(model, how)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    optimizer_step(m, opt, cfg, list(range(6)), batch, cpu, compute=Compute())
    Checkpointer(write, "fp", every=1).save_training(m, opt, 1, [{"step": 1}])
    if not read:
        return {}
    m2 = fresh(model, how)
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
    state = Checkpointer(read, "fp", every=1).restore_training(m2, opt2)
    optimizer_step(m2, opt2, cfg, list(range(6)), batch, cpu, compute=Compute())
    return {"step": state["step"], "resumed": flat_weights(m2)}


def rollout_case(model, tok) -> list[tuple]:
    """Graded samples of 5 questions x 2 (the hf backend on the whole model, as FullWeightsBackend gives it)."""
    from a5core.config.sections import SamplingConfig
    from a5core.data.synthetic import generate
    from a5core.generation.hf import HFBackend
    from a5core.grader.pool import GraderPool
    from a5core.run.evaluation import generate_and_grade

    rows = generate(5, 10, 5, 0.3, 1)["train"][:5]
    with GraderPool("a5core.grader:r1_zero_reward_fn", 1, 10.0) as pool:
        samples = generate_and_grade(
            HFBackend(model, tok, batch_size=3), rows, "r1_zero", SamplingConfig(max_tokens=12, n=2, seed=3), pool,
            progress=False,
        )  # fmt: skip
    return [(s.unique_id, s.sample_index, s.token_ids, s.response, s.reward) for s in samples]


def bf16_rollout_case(model, tok, how: How) -> list[tuple]:
    """Token ids the hf backend samples from its bf16 copy of the policy (fsdp2: a sharded policy, which
    FullWeightsBackend syncs from its whole weights, as a stage does), for 3 prompts x 2."""
    from a5core.config.prompts import build_prompt
    from a5core.config.sections import SamplingConfig
    from a5core.generation.hf import HFBackend

    policy = fresh(model, how).eval()
    backend = distributed.FullWeightsBackend(HFBackend(policy, tok, batch_size=6, bf16=True))
    backend.sync_weights(policy)
    prompts = [build_prompt(q) for q in ("Compute 1+2.", "Solve 3x = 9.", "7*8")]
    out = backend.generate(prompts, SamplingConfig(max_tokens=8, n=2, seed=3), progress=False)
    return [c.token_ids for cs in out for c in cs]


def timeout_case() -> list[str]:
    """Rank 1's answer never finishes grading; its pool times it out and the gather after it completes on both."""
    from a5core.grader.pool import GraderPool

    with GraderPool("tests.support.slow_grader:slow_reward", 1, 2.0) as pool:
        mine = pool.map(["sleep" if distributed.world().rank == 1 else "fast"], ["1"])
    return [g["status"] for g in distributed.gather(mine)]


def compare(ref_path: str, got_path: str) -> None:
    """Print the largest differences of a run from the single process's (reports/distributed.md's table)."""
    ref, got = (torch.load(p, weights_only=False) for p in (ref_path, got_path))
    for case in [k for k in ref if k.startswith(("grpo/", "sft/"))]:
        r, g = ref[case], got[case]
        line = f"{case}: grad {float((r['grad'] - g['grad']).abs().max()):.2e} (max {float(r['grad'].abs().max()):.2e})"
        if "weights" in r:
            line += f", weights {float((r['weights'] - g['weights']).abs().max()):.2e}"
        print(line)
    print("old_log_probs:", max(float((a - b).abs().max()) for a, b in zip(ref["old_log_probs"], got["old_log_probs"])))
    print("rollouts equal:", ref["rollouts"] == got["rollouts"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--compare", nargs=2, metavar=("SINGLE", "OTHER"))
    parser.add_argument("--cross-read", help="a checkpoint folder another layout wrote (cross_case)")
    parser.add_argument("--cross-only", action="store_true", help="run cross_case alone")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    torch.set_num_threads(1)
    how = How(args.strategy)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed.setup(DistributedConfig(nproc=world, strategy=args.strategy))
    model, tok = build_tiny_model(seed=0)
    out: dict = {"world": world, "start": flat_weights(model)}
    cross = Path(args.out).with_name(f"cross_{args.strategy}_{world}" + ("_again" if args.cross_only else ""))
    out["cross"] = cross_case(model, tok, how, cross, args.cross_read)
    if args.cross_only:
        return torch.save(out, args.out) if distributed.is_main() else None
    for loss_type, norm in itertools.product(sorted(PG_LOSSES), sorted(LENGTH_NORMALIZERS)):
        if loss_type == "gspo" and norm != "masked_mean":  # GSPO's objective is a per-sequence mean (refused)
            continue
        out[f"grpo/{loss_type}/{norm}"] = grpo_case(model, tok, how, loss_type, norm, k=3, adam=False)
    out["grpo/one_micro_batch"] = grpo_case(model, tok, how, "grpo_clip", "token_mean", k=1, adam=False)
    out["grpo/adamw"] = grpo_case(model, tok, how, "grpo_clip", "token_mean", k=2, adam=True)
    for norm in ("token_mean", "per_example"):
        out[f"sft/{norm}"] = sft_case(model, tok, how, norm, micro=2)
    chunked = How(args.strategy, Compute(cut=Cut(logits_chunk=4)))  # a forward that is not model(...)
    out["grpo/chunked"] = grpo_case(model, tok, chunked, "grpo_clip", "token_mean", k=3, adam=True)
    out["sft/chunked"] = sft_case(model, tok, chunked, "token_mean", micro=2)
    for update in ("kahan", "stochastic_round"):  # model.weight_update's AdamWs on DTensor shards
        out[f"grpo/{update}"] = grpo_case(model, tok, how, "grpo_clip", "token_mean", k=2, adam=True, update=update)
    m = fresh(model, how)
    out["old_log_probs"] = old_log_probs_for(m, rollouts(tok), 1, torch.device("cpu"), how.compute)
    out["resume"] = resume_case(model, tok, how, Path(args.out).with_name(f"ckpt_{args.strategy}_{world}"))
    kahan = Path(args.out).with_name(f"ckpt_kahan_{args.strategy}_{world}")
    out["resume_kahan"] = resume_case(model, tok, how, kahan, KahanAdamW)  # its compensation buffer and int step too
    out["rollouts"] = rollout_case(model.eval(), tok)
    out["bf16_rollouts"] = bf16_rollout_case(model, tok, how)
    out["timeouts"] = timeout_case()
    out["any_rank"] = [distributed.any_rank(distributed.world().rank == 1), distributed.any_rank(False)]
    if distributed.is_main():
        torch.save(out, args.out)
    distributed.leave()


if __name__ == "__main__":
    main()
