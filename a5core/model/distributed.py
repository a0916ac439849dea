"""Data-parallel training on torch.distributed, the same code on a CPU (gloo) and on GPUs (nccl), under torchrun.

- `DistributedConfig`, the `distributed` params section; dvc.yaml runs the training stages through a5core.stage.launch,
  which starts torchrun with it.
  One process (`nproc: 1`, one node) starts no process group: today's single-process path, byte for byte.
- Questions are split into contiguous blocks by global index (`block`); each request's seed comes from its global
  index (SamplingConfig.index_offset), so the samples do not depend on the world size. Each rank generates and grades
  its block, and the blocks are gathered in order (`gather`): every rank then holds the whole batch, so group
  advantages, EI's filtering and validation metrics are the single process's.
- An optimizer step keeps the single-process step's micro-batches and deals them out over ranks by tokens (`deal`,
  `assign`). Each micro-batch's loss is already its share of the whole step (a5core.model.microbatch.share), so
  gradients are *summed*, in float32 whatever the weights' dtype (`REDUCE`):
  - `ddp`: every rank holds the whole model, rank 0's (`broadcast_weights`; `replicas_differ` checks them at each
    checkpoint); gradients are all-reduced in buckets once per optimizer step (`reduce_gradients`). Why not torch's
    DistributedDataParallel wrapper: a micro-batch with a shared prompt prefix runs two forwards (prefix, then the
    rest on its KV cache) before one backward, which DDP's reducer refuses.
  - `fsdp2`: `fully_shard` per decoder layer, then the root; gradients reduce-scatter with divide factor 1 (a sum) in
    every backward. Every forward all-gathers, so every rank runs the same number of forwards: `deal` pads the short
    ranks with a repeat of the cheapest micro-batch whose loss weight is 0, and the shared-prompt KV cache (two
    forwards for some micro-batches, one for others) is off (a5core/model/logprobs.py); a forward that is not
    `model(...)` (the chunked LM head) runs through `as_forward`, inside the root unit's hooks. The vLLM engine is
    synced from the shards, one `full_tensor()` at a time (`WholeState`, as TRL's colocate mode does), and rank 0
    keeps a whole copy on the CPU for saving; the hf backend generates from a whole copy on each rank
    (`full_weights`). Checkpoints are torch's distributed checkpoint (`save_sharded`): each rank writes its own
    shards, and any layout and world size loads them back, resharded (`load_sharded`); a whole-state checkpoint (one
    process's, ddp's) is read by rank 0 alone and broadcast into the shards (`load_states`; a5core.run.checkpoint).
- Logged sums (loss, tokens, entropy, clip counts) are all-reduced (`all_sum`); clipping sees the global norm
  (replicated gradients under ddp, DTensors under fsdp2). Rank 0 alone writes files (`is_main`).
"""

from __future__ import annotations

import copy
import os
import types
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist

from a5core.config.sections import Positive, Section

BUCKET_BYTES = 25 * 2**20  # gradients all-reduced per collective (DDP's default bucket size)


@dataclass(frozen=True)
class DistributedConfig(Section):
    nproc: Positive = 1  # processes per node (torchrun --nproc-per-node): one per GPU; on a CPU, cores are shared out
    nnodes: Positive = 1  # nodes (torchrun --nnodes); node 0 runs `dvc repro`, the others each training stage
    strategy: Literal["ddp", "fsdp2"] = "ddp"  # ddp: a whole replica per rank; fsdp2: weights, grads, AdamW sharded
    # Where the processes run (hosts, rendezvous endpoint) is no param: it comes from the environment at launch
    # (a5core/stage/launch.py: A5_HOSTS, A5_RDZV_ENDPOINT), so it keys no cache and a stage resumes on other nodes.


@dataclass(frozen=True)
class World:
    """This process's place in the run (rank 0 of 1 without torchrun), as torch's process group says."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1


def world() -> World:
    """This process's place, read from torch's process group and torchrun's LOCAL_* variables (held nowhere else)."""
    if not dist.is_initialized():
        return World()
    local, local_size = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return World(dist.get_rank(), dist.get_world_size(), local, local_size)


def is_main() -> bool:
    return world().rank == 0


def setup(cfg: DistributedConfig) -> World:
    """Join torchrun's process group (cpu:gloo, cuda:nccl) when launched with more than one process; on one process,
    nothing. A launch whose size disagrees with the section is an error (a stale command, or plain python)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size != cfg.nproc * cfg.nnodes:
        raise ValueError(
            f"distributed: {size} process(es) running, but nproc x nnodes = {cfg.nproc * cfg.nnodes}; launch the "
            "stage with `dvc repro` (its command runs torchrun with the section's values)"
        )
    if size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    if size > 1 and torch.cuda.is_available():
        torch.cuda.set_device(world().local_rank)
    return world()


def leave() -> None:
    """Leave torch's process group: one process again (tests, benches)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def is_sharded(model) -> bool:
    """Whether `shard` sharded `model` (fsdp2 in a process group): the model says so, no module holds it."""
    return hasattr(model, "a5_forward")


def device(default: torch.device) -> torch.device:
    """This rank's device: cuda:<local rank> on GPUs, else `default`."""
    return torch.device("cuda", world().local_rank) if default.type == "cuda" else default


def local_share(total: int) -> int:
    """This node's `total` (CPU threads, grader workers) shared out over its processes (at least 1)."""
    return max(1, total // world().local_size)


def block(n: int) -> range:
    """This rank's contiguous share of n items by global index; the blocks, in rank order, are 0..n-1."""
    w = world()
    return range(n * w.rank // w.size, n * (w.rank + 1) // w.size)


def gather(local: list) -> list:
    """Every rank's `local` list, concatenated in rank order, on every rank."""
    if world().size == 1:
        return local
    parts: list = [None] * world().size
    dist.all_gather_object(parts, local)
    return [x for part in parts for x in part]


def all_sum(values: dict[str, float]) -> dict[str, float]:
    """Each key summed over ranks, in rank order (the same floats on every rank); a rank may lack a key."""
    if world().size == 1:
        return values
    parts: list = [None] * world().size
    dist.all_gather_object(parts, values)
    return {k: sum(part.get(k, 0) for part in parts) for k in sorted({k for part in parts for k in part})}


def from_main(obj):
    """Rank 0's `obj` (picklable) on every rank; the others' own are ignored."""
    if world().size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(flag: bool) -> bool:
    """Whether `flag` is true on any rank: a decision every rank takes the same way (a rank's own clock may not)."""
    return bool(flag) if world().size == 1 else all_sum({"flag": int(flag)})["flag"] > 0


def deal(groups: list[list[int]], sharded: bool, cost: list[int] | None = None) -> list[tuple[list[int], float]]:
    """This rank's micro-batches of a step as (indices, loss weight), in the step's order. `cost`: each group's tokens
    (default: its rows); every rank computes the same assignment (`assign`). Under fsdp2 (`sharded`: the policy's
    `is_sharded`) every rank runs as many forwards (each is a collective): a rank short of one repeats the step's
    cheapest group with weight 0."""
    w = world()
    cost = [len(g) for g in groups] if cost is None else cost
    owner = assign(cost, w.size, sharded)
    mine = [(g, 1.0) for g, r in zip(groups, owner) if r == w.rank]
    if sharded and groups:
        cheapest = min(range(len(groups)), key=lambda i: (cost[i], i))
        mine += [(groups[cheapest], 0.0)] * (-(-len(groups) // w.size) - len(mine))
    return mine


def assign(cost: list[int], ranks: int, equal_counts: bool) -> list[int]:
    """Each group's rank, by tokens (verl balances its ranks by tokens too): the costliest group first, each to the
    rank with the fewest tokens so far (ties: the lower rank); `equal_counts` (fsdp2) caps every rank at
    ceil(groups / ranks) groups. Deterministic: every rank computes the same."""
    cap = -(-len(cost) // ranks) if equal_counts else len(cost)
    load, count, owner = [0] * ranks, [0] * ranks, [0] * len(cost)
    for i in sorted(range(len(cost)), key=lambda i: (-cost[i], i)):
        r = min((r for r in range(ranks) if count[r] < cap), key=lambda r: (load[r], r))
        owner[i], load[r], count[r] = r, load[r] + cost[i], count[r] + 1
    return owner


def rank_tokens(cost: list[int], ranks: int, equal_counts: bool) -> list[int]:
    """The tokens each rank computes under `assign` (padding repeats not counted), for the logged spread."""
    out = [0] * ranks
    for c, r in zip(cost, assign(cost, ranks, equal_counts)):
        out[r] += c
    return out


def reduce_gradients(model) -> None:
    """ddp: sum every used parameter's gradient over ranks, in buckets (a rank that ran no micro-batch contributes
    zeros). fsdp2 reduced them in backward; one process has nothing to do."""
    if world().size == 1 or is_sharded(model):
        return
    params = [p for p in model.parameters() if p.requires_grad]
    used = torch.tensor([p.grad is not None for p in params], dtype=torch.int32)  # (P,)
    dist.all_reduce(used)  # a parameter no rank used keeps grad None, as on one process (AdamW skips it)
    params = [p for p, n in zip(params, used.tolist()) if n]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    bucket: list[torch.Tensor] = []
    for p in params:
        if bucket and (
            p.grad.dtype != bucket[0].dtype or sum(g.numel() * g.element_size() for g in bucket) > BUCKET_BYTES
        ):
            _all_reduce(bucket)
            bucket = []
        bucket.append(p.grad)
    if bucket:
        _all_reduce(bucket)


def _all_reduce(grads: list[torch.Tensor]) -> None:
    """Sum `grads` over ranks in one collective, in float32 whatever their dtype (bf16 weights' bf16 gradients would
    otherwise be summed in bf16, rounding at every addition; torchtitan reduces in float32 too)."""
    flat = torch.cat([g.reshape(-1).float() for g in grads])  # (sum of numels,) float32
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def decoder_layers(model) -> torch.nn.ModuleList:
    """The transformer blocks of a transformers causal LM (each is one FSDP2 unit)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"fsdp2: cannot find the decoder layers of {type(model).__name__}")
    return layers


def shard(model, strategy: str, streamed: bool = False):
    """`strategy` fsdp2 in a process group (more than one rank; a bench may make a group of one): `fully_shard`
    each decoder layer, then the root, on a 1-D mesh of every rank; gradients are summed, not averaged (each
    micro-batch's loss is already its share of the step). Otherwise `model` unchanged.
    `streamed`: the generation backend takes the shards (`WholeState`), so only rank 0 keeps a whole copy, on the
    CPU, for saving; else every rank keeps one beside the shards, for generation (`full_weights`)."""
    if not dist.is_initialized():  # one process starts no group (`setup`): nothing to shard
        return model
    if strategy != "fsdp2":  # ddp: every replica starts from rank 0's weights (they load the same folder; made sure)
        broadcast_weights(model)
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    # before sharding: whole tensors, refreshed by full_weights (streamed: copied on the device, then moved, before
    # any gradient or optimizer state exists)
    full = None if streamed and not is_main() else copy.deepcopy(model).eval()
    if streamed and full is not None:
        full.to("cpu")
    mesh = init_device_mesh(next(model.parameters()).device.type, (world().size,))
    units = [*decoder_layers(model), model]
    for unit in units:
        # the root too (torch's default keeps it whole from a forward to the next backward): after a no-grad forward
        # (validation, old log-probs, the engine's probe) its parameters would stay plain tensors, which an optimizer
        # made then would hold and a state dict could not match to the shards
        # gradients reduce-scattered in float32 (bf16 weights compute in bf16; their sum over ranks does not round)
        fully_shard(unit, mesh=mesh, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy(reduce_dtype=REDUCE))
    for unit in units:
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
    # a forward that is not model(...) (the chunked LM head calls the decoder, then the head's weight) runs through
    # this method, which torch's register_fsdp_forward_method wraps in the root unit's forward hooks (`as_forward`)
    model.a5_forward = types.MethodType(lambda self, fn, *args: fn(self, *args), model)
    register_fsdp_forward_method(model, "a5_forward")
    vars(model)["a5_full"] = full  # the whole copy (`full_weights`), in the instance's dict: not a submodule
    return model


REDUCE = torch.float32  # the dtype gradients are summed over ranks in, under both strategies


@torch.no_grad()
def broadcast_weights(model) -> None:
    """ddp: every parameter and buffer of `model` set to rank 0's."""
    for t in [*model.parameters(), *model.buffers()]:
        dist.broadcast(t.data, src=0)


@torch.no_grad()
def checksum(model) -> float:
    """A cheap fingerprint of whole weights (each tensor's float64 sum, weighted by its position, summed)."""
    total = torch.zeros((), dtype=torch.float64)
    for i, p in enumerate(model.parameters()):
        total += (i + 1) * p.detach().double().sum().cpu()
    return float(total)


def replicas_differ(model) -> list[int]:
    """ddp: the ranks whose weights' checksum differs from rank 0's (a collective; [] on one process or fsdp2, whose
    shards are one copy)."""
    if world().size == 1 or is_sharded(model):
        return []
    mine = checksum(model)
    parts: list = [None] * world().size
    dist.all_gather_object(parts, mine)
    return [r for r, c in enumerate(parts) if c != parts[0]]


def as_forward(model, fn, *args):
    """`fn(model, *args)` as a forward of `model`: under fsdp2 the root unit's hooks gather its parameters (embeddings,
    final norm, LM head) around the call and reduce their gradients in backward, as around `model(...)`."""
    return model.a5_forward(fn, *args) if is_sharded(model) else fn(model, *args)


@torch.no_grad()
def full_weights(policy):
    """The policy with whole tensors, for what must not be a collective: generation (ranks sample different prompts
    for different lengths), saving. Under fsdp2 the copy `shard` made, refreshed from the shards one `full_tensor()`
    at a time (every rank calls it at the same point; a rank without a copy, under `streamed`, gets None);
    elsewhere the policy itself."""
    if not is_sharded(policy):
        return policy
    full = vars(policy)["a5_full"]
    mine = {} if full is None else dict(full.named_parameters())
    for name, p in policy.named_parameters():
        whole = _whole(p)
        if mine:
            mine[name].copy_(whole)
    return full


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered (a collective: every rank calls it for the same tensor), else `t` (already whole)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class WholeState:
    """A policy's state dict as (name, whole tensor) pairs, made as they are iterated: under fsdp2 each one is
    gathered by `full_tensor()` then (every rank iterates in the same order; each item is a collective), so a
    consumer that loads and drops them (vLLM's reload) never holds a whole copy. `shapes`: every name's whole
    shape, known before any gathering."""

    def __init__(self, state: dict[str, torch.Tensor]):
        self.state = state
        self.shapes = {name: t.shape for name, t in state.items()}  # a DTensor's shape is the whole one

    def __iter__(self):
        for name, t in self.state.items():
            yield name, _whole(t).detach()

    def __len__(self) -> int:
        return len(self.state)


class FullWeightsBackend:
    """A generation backend synced from `full_weights(policy)` under fsdp2, unless it takes the shards itself
    (`takes_shards`: the vLLM engine, through `WholeState`); otherwise the backend itself."""

    def __init__(self, inner):
        self.inner = inner

    def sync_weights(self, policy) -> None:
        self.inner.sync_weights(policy if self.inner.takes_shards else full_weights(policy))

    def __getattr__(self, name):
        return getattr(self.inner, name)


def model_state(policy) -> dict:
    """The policy's state dict with whole tensors (fsdp2: gathered to rank 0's CPU; the other ranks get {})."""
    if not is_sharded(policy):
        return policy.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def optimizer_state(policy, opt) -> dict:
    """The optimizer's state dict, whole (fsdp2: keyed by parameter name, so any world size can load it)."""
    if not is_sharded(policy):
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(policy, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_states(policy, opt, model: dict, optim: dict) -> None:
    """`model_state` and `optimizer_state` back into the (possibly sharded) policy and its optimizer, whichever
    layout wrote them: one process keys the optimizer state by index, fsdp2 by parameter name (`_rekeyed`)."""
    if not is_sharded(policy):
        policy.load_state_dict(model)
        opt.load_state_dict(_rekeyed(policy, opt, optim, by_name=False))
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)  # rank 0's copy, re-sharded
    set_model_state_dict(policy, model, options=options)
    set_optimizer_state_dict(policy, opt, _rekeyed(policy, opt, optim, by_name=True), options=options)


def save_sharded(policy, opt, folder) -> None:
    """fsdp2: the weights and optimizer state into `folder` with torch.distributed.checkpoint, each rank writing
    its own shards (no rank gathers the whole state; a collective, and every rank needs `folder`: a shared filesystem
    across nodes). Keys are parameter names, so `load_sharded` reshards them onto any layout and world size."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(policy, opt)
    dcp.save({"model": model, "optimizer": optim}, checkpoint_id=folder)


def load_sharded(policy, opt, folder) -> None:
    """`save_sharded`'s checkpoint back into `policy` and `opt` in this run's layout (fsdp2 on any number of ranks,
    ddp, one process): each rank reads the pieces of the saved shards that its own tensors cover. An optimizer
    without state gets it from a zero-learning-rate step first (torch's `_init_optim_state`): DCP loads in place."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, optim = get_state_dict(policy, opt)
    state = {"model": model, "optimizer": optim}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(policy, opt, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _rekeyed(policy, opt, optim: dict, by_name: bool) -> dict:
    """An optimizer state dict keyed by parameter name (`by_name`) or by index in `opt`'s groups, from either."""
    if not optim or (by_name == any(isinstance(p, str) for g in optim["param_groups"] for p in g["params"])):
        return optim  # already so ({}: a rank that gets rank 0's copy under fsdp2)
    names = {id(p): n for n, p in policy.named_parameters()}
    order = [names[id(p)] for g in opt.param_groups for p in g["params"]]  # index -> name
    key = dict(enumerate(order)) if by_name else {n: i for i, n in enumerate(order)}
    groups = [{**g, "params": [key[p] for p in g["params"]]} for g in optim["param_groups"]]
    return {"state": {key[k]: v for k, v in optim["state"].items()}, "param_groups": groups}


def inference(model):
    """A no-grad context for forwards of `model`: inference_mode, but no_grad under fsdp2, whose all-gather buffers
    are reused by the training forwards (which may not write into an inference tensor)."""
    return torch.no_grad() if is_sharded(model) else torch.inference_mode()


def barrier() -> None:
    if world().size > 1:
        dist.barrier()
