"""Memory and disk plans for the configured DAG, before any work:
`python -m a5core.run.plan [--params P] [--gpu-gb 80]`.

- Per device, the training step: weights, gradients and AdamW's two moments (4 x P x bytes(model.dtype), + 2 P bytes
  for `model.weight_update: kahan`; each precision choice's cost in PRECISIONS), one micro-batch's activations (per
  token and layer about 8h + 2kv + 4i values with SDPA attention) and its logits (with two float32 copies, or one
  `model.logits_chunk` of them), and TRANSIENTS x those two (measured on an H200: reports/gpu_check.json).
- On N ranks every number is one rank's GPU: ddp keeps a whole replica; fsdp2 divides the weights, gradients and
  AdamW state by N and adds two gathered layers, the gathered root unit (embeddings, LM head) and, with the hf
  backend only, the whole-weights copy it generates from (vLLM engines are synced one gathered tensor at a time;
  a5core/model/distributed.py). `--scaling` prints the README's table for Qwen2.5-Math-1.5B and 7B on 1 to 8 GPUs.
- The vLLM engine: gpu_memory_utilization x its card, alone (two_gpu) or beside the policy (one_gpu, asleep while the
  policy trains).
- `model.micro_batch_tokens: auto` on CUDA: the largest budget whose step fits AUTO_HEADROOM of the card.
- Disk: every model folder the DAG keeps, the largest resumable checkpoint in `scratch/`, the rollouts, and DVC's
  cache's copy of the models and rollouts (`cache.type = reflink,copy`: reports/inplace_outputs.md).
- A layout that does not fit is refused with the numbers and what to change. Allocated memory only: the allocator's
  cache can reserve more (reports/design_notes.md, reports/README.md).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from a5core.config.sections import (
    BACKEND_FACTS,
    GenerationConfig,
    ModelConfig,
    ReplicatesConfig,
    every_run,
    from_dict,
    load_section,
    read_params,
)
from a5core.model.arch import KNOWN, Arch, architecture

GB = 1024**3
ROOT = Path(__file__).resolve().parents[2]
BYTES = {"float32": 4, "bfloat16": 2}
PROMPT_TOKENS = 300  # r1_zero template + a MATH problem, generously (p99 of MATH prompts is ~250 tokens)
TRANSIENTS = 0.35  # see the module docstring: the measured peak over the formula, with a margin
SFT_TRACE_TOKENS = 1500  # the longest SFT trace tools/fetch_math.py keeps (6,000 characters); SFT has no length cap
# one_gpu: vLLM claims gpu_memory_utilization x the whole card and needs it free when it starts or wakes, so this
# process's CUDA context and the allocator's slack come on top of the policy's resident tensors. The context is an
# allowance (not measured by this project); the slack is measured: reserved minus allocated after GRPO's step on the
# H200 (24.8 - 22.7 GB, reports/gpu_check.json), which empty_cache before each wake returns unless fragmented.
CUDA_CONTEXT_GB = 1.0
# generation.cuda_graphs: the CUDA-graph pool vLLM captures at start stays resident while the engine sleeps (sleep mode
# frees only its weights and KV cache). An allowance, not measured here: vLLM logs the size ("Graph capturing
# finished ... took X GiB") at every engine start.
CUDA_GRAPH_POOL_GB = 1.0
ALLOCATOR_SLACK_GB = 2.2
# model.micro_batch_tokens auto fills at most this share of the card with the plan's allocated memory: the allocator
# reserved 2.1 to 5.4 GB more than was allocated in the H200 measurements above
AUTO_HEADROOM = 0.9


def training_memory(
    arch: Arch,
    dtype: str,
    micro_batch: int,
    seq_len: int,
    update: str = "nearest",
    logits_chunk: int = 0,
    checkpointing: bool = False,
    adapters: int = 0,
    shards: int = 1,
    whole_copy: bool = False,
) -> dict[str, float]:
    """GB of the policy's device for one training step (see the module docstring; `update`: model.weight_update;
    `logits_chunk`, `checkpointing`: model.logits_chunk and model.gradient_checkpointing; `adapters`: LoRA's
    parameters, float32, the only ones with gradients and AdamW moments; `shards`: fsdp2's world size, which
    divides weights, gradients and AdamW state, and adds two gathered layers and the gathered root unit;
    `whole_copy`: fsdp2 with the hf backend, which generates from a whole copy on each rank,
    a5core/model/distributed.py)."""
    b = BYTES[dtype]
    p = arch.parameters
    kv = arch.hidden // arch.heads * arch.kv_heads
    per_token_layer = 8 * arch.hidden + 2 * kv + 4 * arch.intermediate
    tokens = micro_batch * seq_len
    # checkpointing keeps each layer's input and recomputes one layer at a time in backward
    kept = arch.layers * arch.hidden + per_token_layer if checkpointing else arch.layers * per_token_layer
    activations = tokens * kept * b / GB
    logits = min(tokens, logits_chunk or tokens) * arch.vocab * (b + 8) / GB  # chunked: one chunk's at a time
    trained = (adapters, 4) if adapters else (p / shards, b)  # (parameters with gradients and moments, their bytes)
    layer = (p - arch.vocab * arch.hidden * (1 if arch.tied else 2) - arch.hidden) / arch.layers  # one block
    root = arch.vocab * arch.hidden * (1 if arch.tied else 2) + arch.hidden  # embeddings, LM head, final norm
    sharded = {
        "fsdp2: 2 gathered layers": 2 * layer * b / GB,
        "fsdp2: gathered root (embeddings, LM head)": root * b / GB,
        **({"fsdp2: whole-weights copy": p * b / GB} if whole_copy else {}),
    }
    return {
        "weights": p * b / shards / GB,
        **(sharded if shards > 1 else {}),
        **({"lora_adapters": adapters * 4 / GB} if adapters else {}),
        "gradients": trained[0] * trained[1] / GB,
        "adamw_moments": 2 * trained[0] * trained[1] / GB,
        **({"kahan_compensation": p * b / shards / GB} if update == "kahan" and not adapters else {}),  # per shard
        "activations": activations,
        "logits": logits,
        "transients (measured)": TRANSIENTS * (activations + logits),
    }


# The choices of model.dtype x model.weight_update (a5core/model/optim.py; measured in reports/precision.md). What each
# keeps resident on the policy's GPU besides activations: weights, gradients, AdamW's moments (in the weights' dtype)
# and Kahan's compensation buffer. float32 weights also plan float32 activations (autocast keeps matmul outputs in
# bf16, so that is an upper bound).
PRECISIONS = {
    "float32 weights + bf16 autocast": ("float32", "nearest"),
    "bfloat16 weights, nearest": ("bfloat16", "nearest"),
    "bfloat16 weights, stochastic_round": ("bfloat16", "stochastic_round"),
    "bfloat16 weights, kahan": ("bfloat16", "kahan"),
}
STATE = ("weights", "lora_adapters", "gradients", "adamw_moments", "kahan_compensation")
RESIDENT = ("weights", "fsdp2: whole-weights copy", "lora_adapters", "adamw_moments", "kahan_compensation")


def lora_parameters(arch: Arch, rank: int, targets: tuple[str, ...]) -> int:
    """Parameters of rank-`rank` adapters (A: r x in, B: out x r) on the named linear layers of every layer."""
    kv = arch.hidden // arch.heads * arch.kv_heads
    h, i = arch.hidden, arch.intermediate
    shapes = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h)}
    shapes.update({"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)})
    return arch.layers * sum(rank * (a + b) for name, (a, b) in shapes.items() if name in targets)


def precision_costs(arch: Arch) -> dict[str, float]:
    """GB of weights + gradients + AdamW state on the policy's GPU for each choice in PRECISIONS."""
    costs = {}
    for name, (dtype, update) in PRECISIONS.items():
        costs[name] = sum(v for k, v in training_memory(arch, dtype, 1, 1, update).items() if k in STATE)
    return costs


@dataclass
class DevicePlan:
    name: str
    items: dict[str, float]
    capacity: float

    @property
    def total(self) -> float:
        return sum(self.items.values())

    def lines(self) -> list[str]:
        parts = [f"  {k:<34}{v:8.1f} GB" for k, v in self.items.items()]
        verdict = "fits" if self.total <= self.capacity else "DOES NOT FIT"
        return [f"{self.name}:", *parts, f"  {'total':<34}{self.total:8.1f} GB of {self.capacity:.0f} GB: {verdict}"]


def memory_plan(
    arch: Arch,
    dtype: str,
    gen: GenerationConfig,
    micro_batch: int,
    seq_len: int,
    gpu_gb: float,
    update: str = "nearest",
    logits_chunk: int = 0,
    checkpointing: bool = False,
    adapters: int = 0,
    shards: int = 1,
    rollout_tokens: int = PROMPT_TOKENS + 1024,
) -> list[DevicePlan]:
    """One DevicePlan per GPU the layout uses (of each rank, on N ranks); `rollout_tokens`: a generated sequence's
    longest (prompt and response), what the hf backend's KV cache holds per row."""
    hf_copy = not gen.facts.takes_shards  # fsdp2: a backend that takes no shards generates from a whole copy per rank
    chosen = (update, logits_chunk, checkpointing, adapters, shards, hf_copy)
    train = training_memory(arch, dtype, micro_batch, seq_len, *chosen)
    resident = {k: v for k, v in train.items() if k in RESIDENT}  # gradients are freed after each optimizer step
    if not gen.facts.own_engine:  # the policy generates itself, on its own GPU: no engine (generation.layout is vLLM's)
        generating = {**resident, **hf_generation_memory(arch, dtype, gen.batch_size, rollout_tokens)}
        return [
            DevicePlan("GPU 0 while generating (hf backend)", generating, gpu_gb),
            DevicePlan("GPU 0 while training", {**train, "CUDA context": CUDA_CONTEXT_GB}, gpu_gb),
        ]
    engine = gen.gpu_memory_utilization * gpu_gb
    if gen.layout == "two_gpu":
        return [
            DevicePlan("GPU 0 (policy, training)", train, gpu_gb),
            DevicePlan("GPU 1 (vLLM engine)", {"engine (gpu_memory_utilization)": engine}, gpu_gb),
        ]
    slack = CUDA_CONTEXT_GB + ALLOCATOR_SLACK_GB
    generating = DevicePlan(
        "GPU 0 while generating (engine awake)",
        {**resident, "engine (gpu_memory_utilization)": engine, "CUDA context, allocator slack": slack},
        gpu_gb,
    )
    asleep = (
        {"engine asleep (CUDA context, CUDA-graph pool)": CUDA_CONTEXT_GB + CUDA_GRAPH_POOL_GB}
        if gen.cuda_graphs
        else {"engine asleep (CUDA context)": CUDA_CONTEXT_GB}
    )
    training = DevicePlan("GPU 0 while training (engine asleep)", {**train, **asleep}, gpu_gb)
    return [generating, training]


def hf_generation_memory(arch: Arch, dtype: str, rows: int, tokens: int) -> dict[str, float]:
    """GB the hf backend's sampling loop (a5core/generation/hf.py) adds to the policy's GPU while it generates a batch
    of `rows` sequences (generation.batch_size) of up to `tokens`: the KV cache (keys and values of every layer, in
    the weights' dtype), the prefill's largest transient bounded by one layer's activations over the whole batch's
    prompts (PROMPT_TOKENS each; no graph is kept), and the sampling step's buffers over the vocabulary (float32
    logits, softmax and entropy, float64 cumulative sum: 24 bytes per row and token id)."""
    b = BYTES[dtype]
    kv = arch.hidden // arch.heads * arch.kv_heads
    prefill_layer = 8 * arch.hidden + 4 * arch.intermediate  # values per prompt token in one layer
    return {
        "hf backend: KV cache": rows * tokens * arch.layers * 2 * kv * b / GB,
        "hf backend: prefill (one layer's activations)": rows * PROMPT_TOKENS * prefill_layer * b / GB,
        "hf backend: sampling buffers": rows * arch.vocab * 24 / GB,
        "CUDA context, allocator slack": CUDA_CONTEXT_GB + ALLOCATOR_SLACK_GB,
    }


def rl_option_memory(
    params: dict, arch: Arch, dtype: str, micro_batch: int, seq_len: int, logits_chunk: int = 0
) -> dict[str, float]:
    """GB that GRPO's options (a5core/rl/rl_options.py) add to the training GPU when any GRPO run turns them on: the
    frozen reference of the KL term (one more copy of the weights; no gradients or optimizer state), the hf backend's
    own copy of the weights (bf16 generation from float32 weights, as generation.dtype auto on CUDA, in any stage;
    else under asynchronous rollouts, grpo.max_staleness; vLLM's engine has its own GPU), and the entropy bonus's graph
    (its float32 softmax over the vocabulary is kept for backward)."""
    runs = grpo_runs(params)
    extra = {}
    if any(r.get("kl_coef") for r in runs):
        extra["reference policy (grpo.kl_coef)"] = arch.parameters * BYTES[dtype] / GB
    gen = params["generation"]  # the plan is for CUDA, where generation.dtype auto is bf16 (model/autocast.py)
    policy_generates = not BACKEND_FACTS[gen["backend"]].own_engine
    if policy_generates and dtype == "float32" and gen["dtype"] != "float32":
        extra["hf backend's bf16 copy of the weights (generation.dtype)"] = arch.parameters * BYTES["bfloat16"] / GB
    elif policy_generates and any(r.get("max_staleness") for r in runs):
        extra["hf backend's own weights (grpo.max_staleness)"] = arch.parameters * BYTES[dtype] / GB
    if any(r.get("entropy_coef") for r in runs):
        tokens = min(micro_batch * seq_len, logits_chunk or micro_batch * seq_len)
        extra["entropy bonus graph (grpo.entropy_coef)"] = tokens * arch.vocab * 8 / GB
    return extra


def worst_case(params: dict) -> tuple[int, int]:
    """(micro-batch size, sequence length) of the largest training micro-batch any configured stage runs."""
    sft, val, runs = params["sft"], params["validation"], grpo_runs(params)
    grpo_micro = max(r["train_batch_size"] // r["gradient_accumulation_steps"] for r in runs)
    grpo_len = PROMPT_TOKENS + max(r["max_tokens"] for r in runs)
    sft_len = PROMPT_TOKENS + max(SFT_TRACE_TOKENS, val["max_tokens"], params["ei"]["max_tokens"])  # EI: own samples
    candidates = [(grpo_micro, grpo_len), (sft["micro_batch_size"], sft_len)]
    return max(candidates, key=lambda c: c[0] * c[1])


def rollout_tokens(params: dict) -> int:
    """The longest sequence any stage generates: a prompt and the largest max_tokens of GRPO, EI and evaluation."""
    limits = [r["max_tokens"] for r in grpo_runs(params)] + [params["ei"]["max_tokens"]]
    limits += [params[s]["max_tokens"] for s in ("validation", "eval") if s in params]
    return PROMPT_TOKENS + max(limits)


def grpo_runs(params: dict) -> list[dict]:
    """Every GRPO run's settings: the shared section with each `grpo_runs` entry's overrides."""
    return list(every_run(params, "grpo", "grpo_runs").values()) or [params["grpo"]]


def step_tokens(params: dict) -> int:
    """Tokens of the largest optimizer step (padded to its longest sequence): no micro-batch needs more."""
    _, seq = worst_case(params)
    return max(max(r["train_batch_size"] for r in grpo_runs(params)), params["sft"]["batch_size"]) * seq


def training_plans(params: dict, arch: Arch, model: ModelConfig, gen: GenerationConfig, tokens: int, gpu_gb: float):
    """The device plans with a training micro-batch of `tokens` tokens, and GRPO's options' memory on the policy's GPU
    (the reference stays there throughout; the entropy graph exists only while training)."""
    chunk, ckpt = model.logits_chunk, model.gradient_checkpointing
    adapters = lora_parameters(arch, model.lora_rank, model.lora_targets)
    shards = shard_count(params)
    chosen = (model.weight_update, chunk, ckpt, adapters, shards, rollout_tokens(params))
    devices = memory_plan(arch, model.dtype, gen, 1, tokens, gpu_gb, *chosen)
    extra = rl_option_memory(params, arch, model.dtype, 1, tokens, chunk)
    for device in devices:
        if "vLLM engine" not in device.name:
            device.items.update({k: v for k, v in extra.items() if "training" in device.name or "reference" in k})
    return devices


def shard_count(params: dict) -> int:
    """fsdp2's world size (the `distributed` section), else 1: a ddp rank holds what one process does."""
    cfg = params.get("distributed") or {}
    world = cfg.get("nproc", 1) * cfg.get("nnodes", 1)
    return world if cfg.get("strategy") == "fsdp2" and world > 1 else 1


def micro_batch_tokens(params: dict, arch: Arch, model: ModelConfig, gen: GenerationConfig, gpu_gb: float) -> int:
    """model.micro_batch_tokens, or for `auto` the largest micro-batch, in tokens, whose plan fits AUTO_HEADROOM of the
    card (at most one whole optimizer step; 0 when not even one token fits)."""
    if isinstance(model.micro_batch_tokens, int):
        return model.micro_batch_tokens
    lo, hi = 0, step_tokens(params)
    while lo < hi:  # the plan grows with the tokens: bisect for the last that fits
        mid = (lo + hi + 1) // 2
        if all(d.total <= AUTO_HEADROOM * d.capacity for d in training_plans(params, arch, model, gen, mid, gpu_gb)):
            lo = mid
        else:
            hi = mid - 1
    return lo


def ei_rounds(dvc_yaml: Path = ROOT / "dvc.yaml") -> int:
    """The number of `ei_round_<k>` stages in dvc.yaml (DVC cannot make it a param)."""
    return sum(1 for name in yaml.safe_load(dvc_yaml.read_text())["stages"] if re.fullmatch(r"ei_round_\d+", name))


def disk_plan(params: dict, arch: Arch, dtype: str) -> dict[str, float]:
    """GB the configured DAG keeps on disk: each model folder (seed replicates' included) and the EI rollouts twice,
    in the workspace and in DVC's cache (`.dvc/config`'s `cache.type = reflink,copy`: a cache that an in-place write
    to an output cannot reach, reports/inplace_outputs.md; on a filesystem with reflinks, e.g. XFS or btrfs, the two
    share their blocks and the cache's line costs nothing), and the largest resumable checkpoint."""
    model = arch.parameters * BYTES[dtype] / GB
    rounds = ei_rounds()
    replicas = from_dict(ReplicatesConfig, params.get("replicates"), "replicates").stages(rounds)  # a model each
    ei_models = rounds * len(params.get("ei_runs") or {})
    ei_models += sum(name.startswith("ei_") for name in replicas)  # one folder per round of each EI replicate
    n_models = 1 + len(params.get("sft_runs") or {}) + len(params.get("grpo_runs") or {}) + ei_models
    n_models += sum(not name.startswith("ei_") for name in replicas)
    ei = params["ei"]
    rollouts = ei_models * ei["n_questions"] * ei["rollouts_per_question"] * 8e3 / GB
    kahan = (params.get("model") or {}).get("weight_update") == "kahan"
    checkpoint_tensors = 4 if kahan else 3  # weights, two moments (and Kahan's compensation buffer)
    return {
        f"models ({n_models} folders)": n_models * model,
        "largest checkpoint in scratch/": checkpoint_tensors * model,
        "EI rollouts": rollouts,
        "DVC cache copy (models, rollouts)": n_models * model + rollouts,
    }


def stage_disk_need(arch: Arch, dtype: str) -> float:
    """GB one training stage writes before it can finish: its model folder and one resumable checkpoint (twice while
    a new checkpoint replaces the old). DVC's copy of the model into its cache comes after the stage has deleted its
    checkpoint, so it does not raise the peak."""
    return 7 * arch.parameters * BYTES[dtype] / GB


def check_free_disk(path: str | Path, need_gb: float) -> None:
    """Refuse to start a stage whose outputs cannot fit on the disk."""
    free = shutil.disk_usage(Path(path).resolve().anchor if not Path(path).exists() else path).free / GB
    if free < need_gb:
        sys.exit(
            f"error: this stage needs about {need_gb:.1f} GB of disk for its model and checkpoints and "
            f"{free:.1f} GB are free. Free space (`dvc gc --workspace` drops models no branch uses; delete "
            "scratch/ of finished runs), keep fewer runs, or train in bfloat16 (model.dtype). Nothing was run."
        )


def _inputs(params_path: str, model_dir: str) -> tuple[dict, ModelConfig, GenerationConfig, Arch]:
    model = load_section(ModelConfig, "model", params_path)
    gen = load_section(GenerationConfig, "generation", params_path)
    return read_params(params_path), model, gen, architecture(model.source, model_dir)


def device_plans(params_path: str, gpu_gb: float, model_dir: str = "models/base") -> tuple[list[DevicePlan], int]:
    """Each GPU's plan for the params file on a card of gpu_gb, and the training micro-batch in tokens it plans with
    (what `model.micro_batch_tokens: auto` resolves to there)."""
    params, model, gen, arch = _inputs(params_path, model_dir)
    tokens = micro_batch_tokens(params, arch, model, gen, gpu_gb)
    return training_plans(params, arch, model, gen, max(tokens, worst_case(params)[1]), gpu_gb), tokens


def report(params_path: str, gpu_gb: float, model_dir: str = "models/base") -> tuple[list[str], bool, int]:
    """The plan's lines, whether the memory plan fits (a CPU-only layout always does), and the training micro-batch
    in tokens it plans with (what `model.micro_batch_tokens: auto` resolves to on a card of gpu_gb)."""
    params, model, gen, arch = _inputs(params_path, model_dir)
    _, seq = worst_case(params)
    rollout = PROMPT_TOKENS + max(r["max_tokens"] for r in grpo_runs(params))
    devices, tokens = device_plans(params_path, gpu_gb, model_dir)
    how = (
        "auto: the largest within 90% of the card" if model.micro_batch_tokens == "auto" else "model.micro_batch_tokens"
    )
    generation = f"{gen.backend} backend, " + (
        f"layout {gen.layout}" if gen.facts.own_engine else "on the policy's GPU"
    )
    lines = [
        f"model {model.source}: {arch.parameters / 1e9:.3f} B parameters, trained and saved in {model.dtype} "
        f"(weight update {model.weight_update}); {generation}, card {gpu_gb:.0f} GB",
        f"training micro-batch: {tokens} tokens ({how}) = {tokens / rollout:.1f} GRPO rollouts of {rollout} tokens, "
        f"{tokens / seq:.1f} sequences of the longest {seq}; logits_chunk {model.logits_chunk}, "
        f"gradient_checkpointing {model.gradient_checkpointing}",
    ]
    for device in devices:
        lines += device.lines()
    chosen = next(n for n, c in PRECISIONS.items() if c == (model.dtype, model.weight_update))
    lines.append("precision choices (weights + gradients + AdamW state on the policy's GPU; reports/precision.md):")
    lines += [
        f"  {n:<38}{v:8.1f} GB{'  (this profile)' if n == chosen else ''}" for n, v in precision_costs(arch).items()
    ]
    disk = disk_plan(params, arch, model.dtype)
    free = shutil.disk_usage(".").free / GB
    lines += [
        "disk:",
        *[f"  {k:<34}{v:8.1f} GB" for k, v in disk.items()],
        f"  {'total':<34}{sum(disk.values()):8.1f} GB; free here: {free:.1f} GB",
    ]
    ranks = {"nproc": 1, "nnodes": 1, "strategy": "ddp", **(params.get("distributed") or {})}  # section defaults
    world = ranks["nproc"] * ranks["nnodes"]
    lines.insert(2, f"distributed: {world} rank(s), {ranks['strategy']}; every number is per GPU")
    two_gpu_ranks = world > 1 and gen.engine_gpu
    if two_gpu_ranks:
        lines.append("Refused: on N ranks each rank's engine shares its GPU: set generation.layout one_gpu")
    fits = all(d.total <= d.capacity for d in devices) and tokens >= seq and not two_gpu_ranks
    if not fits:
        lines.append(
            "Refused: this layout does not fit. Train in bfloat16 (model.dtype), put the engine on a second GPU "
            "(generation.layout: two_gpu), lower generation.gpu_memory_utilization (one_gpu), or shrink the "
            "micro-batch (model.micro_batch_tokens, at least the longest sequence), or turn on model.logits_chunk "
            "and model.gradient_checkpointing."
        )
    return lines, fits, tokens


SCALING = [  # the README's table: (model.source, GPUs, strategy)
    *[("hf:Qwen/Qwen2.5-Math-1.5B", n, s) for n, s in ((1, "ddp"), (2, "ddp"), (2, "fsdp2"), (8, "ddp"), (8, "fsdp2"))],
    *[("hf:Qwen/Qwen2.5-Math-7B", n, s) for n, s in ((1, "ddp"), (8, "ddp"), (8, "fsdp2"))],
]


def scaling(gpu_gb: float, tokens: int = 2 * 1324) -> list[str]:
    """Per-GPU training memory (bf16 weights, AdamW, a micro-batch of `tokens`: the handout's 2 rollouts of 1,324) for
    each row of SCALING, and the largest generation.gpu_memory_utilization a colocated engine (one_gpu) can have."""
    lines = [
        f"| model | GPUs | strategy | state (GB) | training step (GB) | fits {gpu_gb:.0f} GB | one_gpu engine share |",
        "|---|---:|---|---:|---:|---|---:|",
    ]
    for source, gpus, strategy in SCALING:
        m = training_memory(Arch.of(KNOWN[source]), "bfloat16", 1, tokens, shards=gpus if strategy == "fsdp2" else 1)
        state = sum(v for k, v in m.items() if k in STATE or k.startswith("fsdp2"))
        room = (gpu_gb - sum(v for k, v in m.items() if k in RESIDENT) - CUDA_CONTEXT_GB - ALLOCATOR_SLACK_GB) / gpu_gb
        verdict = "yes" if sum(m.values()) <= AUTO_HEADROOM * gpu_gb else "no"
        lines.append(
            f"| {source.split('/')[-1]} | {gpus} | {strategy} | {state:.1f} | {sum(m.values()):.1f} | {verdict} | "
            f"{max(room, 0):.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--gpu-gb", type=float, default=80.0, help="memory of one GPU in GB (default: an 80 GB card)")
    parser.add_argument("--model-dir", default="models/base")
    parser.add_argument("--scaling", action="store_true", help="the README's per-GPU table for 1 to 8 GPUs")
    args = parser.parse_args()
    if args.scaling:
        sys.exit(print("\n".join(scaling(args.gpu_gb))))
    lines, fits, _ = report(args.params, args.gpu_gb, args.model_dir)
    print("\n".join(lines))
    sys.exit(0 if fits else 1)


if __name__ == "__main__":
    main()
