"""Exact resume and safe numerics on GPUs, checked on this CPU (issue 45, item 4).

- The checkpoint saves every rank's CUDA generator (its own device's) and restores this rank's: with no GPU here,
  torch.cuda's generator functions are replaced by stand-ins that hold the states (a fake CUDA generator state, as
  the issue allows; a resumed stochastic-rounding run on the CPU generator is tests/test_checkpoint.py's).
- Gradients are summed over ranks in float32 under bf16 weights: ddp's bucket (the collective is watched) and
  fsdp2's `MixedPrecisionPolicy(reduce_dtype=float32)` on every unit.
- ddp replicas start from rank 0's weights (a broadcast), and a checkpoint refuses replicas that disagree
  (2 gloo processes).
"""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from a5core.model import distributed
from a5core.run import checkpoint
from a5core.run.checkpoint import Checkpointer


class FakeCuda:
    """CUDA devices' generator states, as torch.cuda's functions would keep them."""

    def __init__(self, devices: int = 2):
        self.states = [torch.tensor([1 + d, 2, 3], dtype=torch.uint8) for d in range(devices)]

    def install(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(self.states))
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=0: self.states[device].clone())
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=0: self.states.__setitem__(device, state))


def test_a_checkpoint_restores_the_cuda_generator_a_weight_update_draws_from(tmp_path, monkeypatch):
    fake = FakeCuda()
    fake.install(monkeypatch)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    ckpt = Checkpointer(tmp_path / "ckpt", "fp", every=1)
    ckpt.save_training(model, opt, 1, [])
    saved = fake.states[0].clone()
    fake.states[0] = torch.zeros(3, dtype=torch.uint8)  # the generator moves on after the save
    state = ckpt.restore_training(model, opt)
    assert state["step"] == 1 and fake.states[0].tolist() == saved.tolist()
    other = FakeCuda(devices=1)  # resumed on a machine with another GPU count: this rank's device gets it
    other.install(monkeypatch)
    other.states[0] = torch.zeros(3, dtype=torch.uint8)
    ckpt.restore_training(model, opt)
    assert other.states[0].tolist() == saved.tolist()


def test_an_older_checkpoint_without_cuda_generators_still_resumes():
    before = checkpoint.rng_state()
    checkpoint.set_rng_state({"torch": before["torch"], "python": before["python"]})
    assert torch.equal(torch.get_rng_state(), before["torch"])


def test_ddp_sums_bf16_gradients_in_float32(monkeypatch):
    seen = []

    def all_reduce(t):
        seen.append(t.dtype)
        t.mul_(2)  # two ranks with the same gradient

    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    grads = [torch.full((3,), 1.0078125, dtype=torch.bfloat16), torch.ones(2, 2, dtype=torch.bfloat16)]
    distributed._all_reduce(grads)
    assert seen == [torch.float32] and [g.dtype for g in grads] == [torch.bfloat16] * 2
    assert grads[0].tolist() == [2.015625] * 3 and grads[1].tolist() == [[2.0, 2.0]] * 2


def _group_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)


def test_fsdp2_reduce_scatters_in_float32(tmp_path):
    from a5core.model.loading import build_tiny_model

    _group_of_one(tmp_path)
    try:
        model = distributed.shard(build_tiny_model()[0].to(torch.bfloat16), "fsdp2")
        units = [*distributed.decoder_layers(model), model]
        assert {u._get_fsdp_state()._mp_policy.reduce_dtype for u in units} == {torch.float32}
    finally:
        distributed.leave()


def _replicas(rank: int, store: str, out: str) -> None:
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(rank)  # each rank's own initialization: the broadcast makes them rank 0's
    model = distributed.shard(torch.nn.Linear(4, 3), "ddp")
    started_equal = distributed.replicas_differ(model) == []
    if rank == 1:
        with torch.no_grad():
            model.bias[0] += 1e-6
    differ = distributed.replicas_differ(model)
    opt = torch.optim.AdamW(model.parameters())
    try:
        Checkpointer(os.path.join(out, "ckpt"), "fp", every=1).save_training(model, opt, 3, [])
        refused = ""
    except RuntimeError as e:
        refused = str(e)
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(f"{started_equal}|{differ}|{refused}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_replicas_start_from_rank_0_and_a_checkpoint_refuses_replicas_that_drifted(tmp_path):
    mp.spawn(_replicas, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        started_equal, differ, refused = (tmp_path / f"rank{rank}.txt").read_text().split("|")
        assert started_equal == "True" and differ == "[1]"
        assert refused.startswith("ddp replicas disagree at step 3: ranks [1] hold other weights than rank 0")
    assert not (tmp_path / "ckpt" / "state").exists()


@pytest.mark.parametrize("equal_counts", [False, True])
def test_ranks_are_dealt_micro_batches_by_tokens(monkeypatch, equal_counts):
    """Round-robin over a longest-first list gave rank 0 every heaviest group (19 tokens against 11 here); by tokens
    the busiest rank computes 17 (ddp) or 18 (fsdp2: three groups each, the best such split), every group once."""
    cost = [10, 9, 8, 1, 1, 1]
    assert distributed.rank_tokens(cost, 2, equal_counts) == ([12, 18] if equal_counts else [13, 17])
    groups = [[i] for i in range(len(cost))]
    dealt = {}
    for rank in (0, 1):
        monkeypatch.setattr(distributed, "world", lambda r=rank: distributed.World(r, 2))
        dealt[rank] = distributed.deal(groups, sharded=equal_counts, cost=cost)
    real = sorted(g[0] for rank in dealt.values() for g, w in rank if w == 1.0)
    assert real == list(range(len(cost)))
    if equal_counts:  # fsdp2: as many forwards on each rank; none needed a repeat here
        assert len(dealt[0]) == len(dealt[1]) == 3
    odd = {}
    for rank in (0, 1):
        monkeypatch.setattr(distributed, "world", lambda r=rank: distributed.World(r, 2))
        odd[rank] = distributed.deal(groups[:5], sharded=True, cost=cost[:5])
    repeats = [g for rank in odd.values() for g, w in rank if w == 0.0]
    assert repeats == [[3]] and len(odd[0]) == len(odd[1]) == 3  # the cheapest group repeated, not the longest
