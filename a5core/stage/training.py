"""Glue shared by the training stages (sft, ei_round, grpo).

- `StageParams`: the sections every training stage shares (model, generation, validation, logging, distributed),
  typed once from the params the stage read once, and passed down.
- `training_stage(...)`: the common prologue, as one context: grader pools, `training_start` (plans, the policy and
  its backend, validation rows), the run history, the validator and the starting policy's validation.
- `Validator`: a policy's validation, the whole set (the reported number) or a fixed seeded subset (mid-run curves).
- `save_policy` writes a policy folder with its validation, so the next stage starts its curve (EI round 0, GRPO
  step 0) and its paired comparison without evaluating the same weights again; `write_results` the metrics files.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import random
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a5core.base.artifacts import content_hash, default_modes, fresh_dir, provenance, write_json
from a5core.base.code import code_roots
from a5core.base.code import fingerprint as code_fingerprint
from a5core.base.run_record import write_run_record
from a5core.base.seeds import derive_seed
from a5core.base.stats import paired_difference
from a5core.base.typed import check_pinned_params
from a5core.config.prompts import R1_ZERO_CHAT_TEMPLATE, STOPS
from a5core.config.sections import EvalConfig, GenerationConfig, LoggingConfig, ModelConfig, section_of
from a5core.generation import make_backend
from a5core.grader.pool import GraderPool
from a5core.model import distributed, lora, microbatch
from a5core.model.compute import Compute
from a5core.model.loading import load_policy
from a5core.run import kept
from a5core.run.checkpoint import Preempted, fingerprint, take_preemption_signals
from a5core.run.evaluation import Evaluation, evaluate_policy, first_completions
from a5core.run.history import RunHistory, is_timing
from a5core.stage import entry

VALIDATION_FILE = "validation.json"
# Bump when what a validation record holds changes without a params change, so saved records are measured again
# (2: sampling streams from a5core.base.seeds.derive_seed, namespaced metric names).
PROTOCOL_VERSION = 2
QUESTION_COLUMNS = ("unique_id", "problem", "answer")  # what a validation question is


@dataclass(frozen=True)
class StageParams:
    """The sections every training stage reads besides its method's, typed and checked once in its prologue (`of`,
    on the params the stage read once) and passed down to `training_stage`: nothing below reads them again."""

    path: str  # the params file they were read from (in error messages; the plans and the pre-flight read it whole)
    model: ModelConfig
    generation: GenerationConfig
    validation: EvalConfig
    logging: LoggingConfig
    distributed: distributed.DistributedConfig

    @classmethod
    def of(cls, params: dict[str, Any], path: str) -> StageParams:
        return cls(
            path=path,
            model=section_of(params, ModelConfig, "model", path),
            generation=section_of(params, GenerationConfig, "generation", path),
            validation=section_of(params, EvalConfig, "validation", path),
            logging=section_of(params, LoggingConfig, "logging", path),
            distributed=section_of(params, distributed.DistributedConfig, "distributed", path),
        )


@dataclass
class TrainingStart:
    """What every training stage starts from."""

    validation: EvalConfig  # the `validation` section
    generation: GenerationConfig
    logging: LoggingConfig
    policy: Any
    tokenizer: Any
    backend: Any  # generation backend bound to the policy
    validation_rows: list[dict]
    compute: Compute  # the `model` section as resolved here (micro-batches, autocast, weight update): every loop's
    lora: dict | None = None  # model.lora_rank, lora_alpha, lora_targets

    def numerics(self) -> dict:
        """What sets the run's arithmetic besides its params: in its provenance and its resume fingerprint (the
        compute and LoRA settings only when not the handout's path, so that a default run's artifacts stay what they
        were)."""
        c = self.compute
        cut = {} if c.cut == microbatch.Cut() else {"compute": dataclasses.asdict(c.cut)}
        adapters = {"lora": self.lora} if self.lora and self.lora["rank"] else {}
        return {
            "model_dtype": self.policy.dtype,
            "bf16_autocast": c.bf16_autocast,  # as resolved on this machine (its fingerprint)
            **({"bf16_generation": True} if c.generation_bf16 else {}),  # rollouts from the bf16 copy
            "weight_update": c.weight_update,  # a checkpoint's optimizer state is only valid for its own
            **cut,
            **adapters,
        }


def training_start(args: argparse.Namespace, params: StageParams, seed: int) -> TrainingStart:
    """Seed torch, check the memory and disk plans, resolve the `model` section into the stage's `Compute` record,
    load the policy in `args.model` (in model.dtype; sharded under distributed.strategy fsdp2 on N ranks) and its
    backend, read `args.validation`."""
    generation, model = params.generation, params.model
    questions = entry.rows(args.validation, list(QUESTION_COLUMNS))  # a bad file stops the stage before any load
    planned = check_plans(params.path, args.model, model.dtype)  # on CUDA: what micro_batch_tokens auto means
    device = distributed.device(entry.setup_torch(seed, share=distributed.local_share))
    compute = Compute.of(model, device, planned, generation=generation)  # passed to every loop, step and log-prob
    policy, tokenizer = load_policy(args.model, device, model.dtype)
    policy = lora.attach(policy, model.lora_rank, model.lora_alpha, model.lora_targets)
    microbatch.prepare(policy, compute.cut)
    policy = distributed.shard(policy, params.distributed.strategy, streamed=generation.facts.takes_shards)
    return TrainingStart(
        validation=params.validation,
        generation=generation,
        logging=params.logging,
        policy=policy,
        tokenizer=tokenizer,
        backend=distributed.FullWeightsBackend(
            make_backend(
                generation, args.model, policy, tokenizer, seed=seed, bf16=compute.generation_bf16, cut=compute.cut
            )
        ),
        validation_rows=questions,
        compute=compute,
        lora={"rank": model.lora_rank, "alpha": model.lora_alpha, "targets": model.lora_targets},
    )


@dataclass
class TrainingStage:
    """What a training stage has once its prologue ran (`training_stage`)."""

    name: str  # the stage's name, e.g. grpo@reinforce_baseline (console, provenance)
    start: TrainingStart
    pool: GraderPool  # grades the training reward (SFT: validation's pool)
    validate: Validator
    history: RunHistory
    protocol: str  # validation_protocol of this stage's validations
    initial: dict  # the starting policy's full validation record

    @property
    def main(self) -> bool:
        """Whether this process writes the stage's outputs (rank 0 of a distributed run)."""
        return distributed.is_main()

    def write_run_record(self, folder: str, **facts) -> None:
        """The stage run's record (a5core/base/run_record.py), with the autocast in force and `facts` (rank 0)."""
        write_run_record(folder, self.name, autocast=dataclasses.asdict(self.start.compute.autocast), **facts)

    def save(self, out: str, final: Evaluation, params: dict, inputs: dict) -> None:
        """The trained policy's folder, with its provenance and its final validation (every rank calls it; rank 0
        writes)."""
        record = validation_record(final, self.protocol, self.start.logging.completions)
        self.save_model(out, provenance(self.name, params, inputs), record)

    def save_model(self, out: str, prov: dict, validation: dict) -> None:
        policy = distributed.full_weights(self.start.policy)  # a collective under fsdp2
        if self.main:
            save_policy(policy, self.start.tokenizer, out, prov, validation)


@contextlib.contextmanager
def training_stage(
    args: argparse.Namespace,
    name: str,
    *,
    params: StageParams,
    seed: int,
    subset_size: int,
    initial_from: str,
    train_reward: str | None = None,
    val_reward: str | None = None,
    prompt: str | None = None,
) -> Iterator[TrainingStage]:
    """The training stages' prologue, on the stage's shared sections `params` (read once by the stage): start the
    grader pools (`train_reward`, `val_reward`, default: the validation section's; one pool when equal) so their
    imports overlap the model load, `training_start`, the run history, the
    validator (with `prompt`, default: the validation section's) and the validation of the policy in
    `initial_from` (saved with it under the same protocol, or measured now). The pools and history close on exit."""
    take_preemption_signals()  # SIGUSR1/SIGTERM from now on: a checkpoint at the next step boundary, then `Preempted`
    distributed.setup(params.distributed)
    validation = params.validation
    train_reward, val_reward = train_reward or validation.reward_fn, val_reward or validation.reward_fn
    pool = grader_pool(validation, train_reward).start()
    vpool = pool if val_reward == train_reward else grader_pool(validation, val_reward).start()
    start = training_start(args, params, seed)
    protocol = validation_protocol(start.validation, args.validation, start.compute.generation_bf16, prompt)
    history = RunHistory(
        args.live,
        args.logs,
        name=name,
        total_steps=0,
        cfg=start.logging,
        write=distributed.is_main(),
        timing_dir=args.record,
    )
    with history, pool, vpool:
        validate = Validator(start, vpool, subset_size=subset_size, prompt=prompt)
        initial = initial_validation(initial_from, protocol, validate, start.policy, start.logging.completions)
        try:
            yield TrainingStage(name, start, pool, validate, history, protocol, initial)
        except KeyboardInterrupt:  # Ctrl-C: entry.run ends the stage with one line saying how far it got
            raise KeyboardInterrupt(f"{name} at {_steps_done(history)}") from None
        except Preempted as stop:  # entry.run: one line, exit REQUEUE
            raise Preempted(f"{name} at {_steps_done(history)} ({stop.args[0]})", stop.step) from None


def _steps_done(history: RunHistory) -> str:
    return f"optimizer step {history.optimizer_steps} of {history.total_steps or '?'}"


def finished_before(args: argparse.Namespace, fp: str) -> bool:
    """Whether `args.scratch` keeps the outputs of a finished run of fingerprint `fp` (a5core/run/kept.py: DVC's commit
    of them did not happen); rank 0 reads, every rank gets the answer. The stage then trains nothing and, once its
    history is closed, `put_back` restores them."""
    return bool(distributed.from_main(kept.has(args.scratch, _with_code(fp)) if distributed.is_main() else None))


def put_back(args: argparse.Namespace, fp: str, name: str) -> None:
    """Restore the outputs `finished_before` found (rank 0), saying so in one line."""
    if distributed.is_main():
        n = kept.put_back(args.scratch, _with_code(fp))
        print(
            f"{name}: put back the {n} output files of a finished run of these params and inputs (kept in "
            f"{args.scratch}/{kept.KEPT} because DVC had not committed them): nothing trained"
        )


def keep_outputs(args: argparse.Namespace, fp: str) -> None:
    """A training stage's last step, on every rank once its outputs are written: its resume state in `args.scratch`
    gives way to its outputs (`--out`, the folder of `--metrics`, `--record`), kept until DVC's cache holds them
    (a5core/run/kept.py); refused when the params file changed under the stage (`ParamsChanged`: the state stays)."""
    check_pinned_params()
    distributed.barrier()
    if distributed.is_main():
        kept.keep(args.scratch, _with_code(fp), [args.out, str(Path(args.metrics).parent), args.record])
    distributed.barrier()


def _with_code(fp: str) -> str:
    """`fp` (params and inputs) and the code that runs as the code_hashes stage hashes it (a5core/base/code.py):
    a5core, rewards/ and the stage script, so outputs kept by other code are never put back under this code's
    dvc.lock entry (and a docstring edit does not discard them)."""
    return hashlib.sha256((fp + _code()).encode()).hexdigest()


@functools.cache
def _code() -> str:
    """The fingerprints of the code this process runs (a5core, rewards/, its script), hashed once: the stage's
    start, its end and a put-back see the same code."""
    repo = Path(__file__).resolve().parents[2]
    roots = [*(p for name, p in code_roots(repo).items() if not name.startswith("stages/")), Path(sys.argv[0])]
    return "".join(code_fingerprint(root.resolve(), root.resolve().parent) for root in roots)


def grader_pool(cfg: EvalConfig, reward_fn: str | None = None) -> GraderPool:
    """A grading pool with the section's workers (shared out over a node's ranks), time limit and grader audit (and its
    reward_fn unless another is named)."""
    workers = distributed.local_share(cfg.grader_workers)
    return GraderPool(reward_fn or cfg.reward_fn, workers, cfg.grader_timeout_s, audit=cfg.grader_audit)


def check_plans(params: str, model_dir: str, dtype: str) -> int | None:
    """Refuse to start when the stage's model and checkpoints cannot fit on the disk, or (on CUDA) when the memory
    plan of `python -m a5core.run.plan` does not fit the GPUs. On CUDA, returns the training micro-batch in tokens
    that the plan chose (model.micro_batch_tokens auto: the largest that fits); elsewhere None (auto: the handout's
    split)."""
    import torch

    from a5core.run import plan

    arch = plan.Arch.of(json.loads((Path(model_dir) / "config.json").read_text()))
    plan.check_free_disk("models", plan.stage_disk_need(arch, dtype))
    if torch.cuda.is_available():
        gpu_gb = torch.cuda.get_device_properties(0).total_memory / plan.GB
        lines, fits, tokens = plan.report(params, gpu_gb, model_dir)
        print("\n".join(lines))
        if not fits:
            raise SystemExit("error: the memory plan does not fit (above). Nothing was run.")
        return tokens
    return None


class Validator:
    """Evaluates a policy on the validation questions: all of them (`full=True`, the reported number), or a fixed
    seeded subset of `subset_size` (mid-run curves; the same questions and sample seeds at every step).

    `prompt`: the prompt to validate with (a GRPO run uses its own, with its own reward in `pool`).
    """

    def __init__(self, start: TrainingStart, pool: GraderPool, *, subset_size: int, prompt: str | None = None):
        self.start, self.pool, self.prompt = start, pool, prompt or start.validation.prompt
        rows = start.validation_rows
        k = min(subset_size, len(rows))
        self.subset = [
            rows[i]
            for i in sorted(
                random.Random(derive_seed(start.validation.seed, "validation_subset")).sample(range(len(rows)), k)
            )
        ]

    def __call__(self, policy, *, full: bool) -> Evaluation:
        self.start.backend.sync_weights(policy)
        rows = self.start.validation_rows if full else self.subset
        return evaluate_policy(
            policy,
            self.start.tokenizer,
            self.start.backend,
            rows,
            self.start.validation,
            self.pool,
            progress=True,
            prompt=self.prompt,
            cut=self.start.compute.cut,
        )


def validation_protocol(cfg: EvalConfig, validation_path: str, bf16: bool, prompt: str | None = None) -> str:
    """Hash of what a full validation depends on besides the weights: settings, prompt, the questions' content (not
    the file's bytes: two writes of the same questions may differ in metadata) and whether it generates in `bf16`
    (the stage's `generation_bf16`: a record measured under another precision is measured again, not paired)."""
    questions = content_hash(entry.rows(validation_path, list(QUESTION_COLUMNS)), list(QUESTION_COLUMNS))
    numerics = "copy" if bf16 else False  # older records hashed True for generation under bf16 autocast
    return fingerprint(
        {
            "validation": cfg,
            "prompt": prompt or cfg.prompt,
            "questions": questions,
            "bf16": numerics,
            "version": PROTOCOL_VERSION,
        },
        {},
    )


def load_validation(path: str | Path, protocol: str) -> dict | None:
    """{"metrics", "per_question"} saved at `path` (a JSON file, or a model folder holding one) when it was
    measured under `protocol`; else None. Evaluation is seeded per request, so these equal a new measurement."""
    path = Path(path)
    path = path / VALIDATION_FILE if path.is_dir() else path
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved if saved.get("protocol") == protocol and "per_question" in saved else None


def validation_record(evaluation: Evaluation, protocol: str, shown: int) -> dict:
    """A full validation as saved: its protocol, metrics and per-question scores, pass@k and maj@n per question
    (n > 1), and its first `shown` completions (a model folder's record: GRPO logs them as its step 0)."""
    record = {"protocol": protocol, "metrics": evaluation.metrics, "per_question": evaluation.per_question}
    record |= {"at_k": evaluation.at_k} if evaluation.at_k else {}
    return record | ({"completions": first_completions(evaluation, shown)} if shown else {})


def initial_validation(path: str | Path, protocol: str, validate: Validator, policy, shown: int) -> dict:
    """The starting policy's full validation: saved with it under the same protocol, or measured now (with its first
    `shown` completions)."""
    return load_validation(path, protocol) or validation_record(validate(policy, full=True), protocol, shown)


def paired_summary(final: Evaluation, initial: dict) -> dict:
    """The change from the starting policy on the same questions and seeds, with its paired 95% interval."""
    delta, lo, hi = paired_difference(final.per_question, initial["per_question"])
    out = {
        "eval/initial_accuracy": initial["metrics"]["eval/accuracy"],
        "eval/delta": delta,
        "eval/delta_lo": lo,
        "eval/delta_hi": hi,
        "eval/delta_excludes_zero": lo > 0 or hi < 0,
    }
    for name, scores in final.at_k.items():  # pass@k and maj@n, paired the same way, where both measured them
        if name in initial.get("at_k", {}):
            d, lo, hi = paired_difference(scores, initial["at_k"][name])
            out |= {f"eval/delta_{name}": d, f"eval/delta_{name}_lo": lo, f"eval/delta_{name}_hi": hi}
    return out


class Snapshots:
    """Intermediate models a user can load: every `every` steps (logging.save_every; 0 = none), the policy as an HF
    folder `<folder>/step_<k>` (the same format as the final model). A step is an optimizer step in SFT and a GRPO
    step (one rollout batch, its optimizer steps done) in GRPO; EI rounds save no snapshots (each round's model is
    already a stage output). Outside DVC and git: `checkpoints/`."""

    def __init__(self, folder: str | Path, every: int, tokenizer, prov: dict):
        self.folder, self.every, self.tokenizer, self.prov = Path(folder), every, tokenizer, prov

    def __call__(self, policy, step: int) -> None:
        if self.every and step % self.every == 0:
            policy = distributed.full_weights(policy)  # a collective under fsdp2: every rank calls it
            if distributed.is_main():
                save_policy(policy, self.tokenizer, self.folder / f"step_{step}", {**self.prov, "step": step})


METRIC_KEYS = ("eval/accuracy", "eval/accuracy_lo", "eval/accuracy_hi", "eval/delta", "eval/delta_lo", "eval/delta_hi")


def write_results(
    metrics_path: str | Path, final: Evaluation, initial: dict | None = None, protocol: str | None = None, **extra
) -> dict:
    """A stage's results: `metrics.json` holds the few numbers `dvc metrics show` / `dvc exp show` list (accuracy
    with its 95% interval, and the paired change from the starting policy with its interval); `details.json` beside
    it holds the rest (format rate, protocol size, starting accuracy, steps, ...: `extra`, but wall-clock values);
    with `protocol`, `validation.json` beside them holds the final validation per question (a trained run's: the
    summary's seed-replicate intervals read it)."""
    out = {**final.metrics, **(paired_summary(final, initial) if initial else {}), **extra}
    metrics_path = Path(metrics_path)
    write_json({k: out[k] for k in METRIC_KEYS if k in out}, metrics_path)
    # Wall-clock values (`*_s`) go to the stage's run record instead: details.json is read by the plots stage.
    details = {k: v for k, v in out.items() if k not in METRIC_KEYS and not is_timing(k)}
    write_json(details, metrics_path.with_name("details.json"))
    if protocol is not None:
        write_json(validation_record(final, protocol, shown=0), metrics_path.with_name(VALIDATION_FILE))  # scores
    return out


def save_policy(policy, tokenizer, out: str | Path, prov: dict, validation: dict | None = None) -> None:
    """A loadable HF folder, written beside `out` and renamed into place (never written into an existing, possibly
    cache-linked, output): weights in the training dtype, the tokenizer with the r1_zero chat template, a generation
    config that stops at `</answer>`, provenance.json, and the final validation (validation.json) when given. A LoRA
    policy is saved with its adapters merged (a5core/model/lora.py)."""
    from transformers import GenerationConfig as HFGenerationConfig

    policy = lora.for_saving(policy)
    out = Path(out)
    tmp = fresh_dir(out)
    try:
        policy.generation_config = HFGenerationConfig(
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=1024,
            stop_strings=list(STOPS["r1_zero"]),
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        policy.save_pretrained(tmp)
        tokenizer.chat_template = R1_ZERO_CHAT_TEMPLATE
        tokenizer.save_pretrained(tmp)
        write_json(prov, tmp / "provenance.json")
        if validation:
            write_json(validation, tmp / VALIDATION_FILE)
        default_modes(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
