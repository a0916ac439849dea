"""Stage grpo@<run>: GRPO with one named run's overrides on the shared `grpo` params; with `--seed`, stage
grpo_replicate@<run>-<seed>: the same run with grpo.seed replaced (a5core/report/replicates.py)."""

import dataclasses

from a5core.config.prompts import REWARD_FNS
from a5core.config.sections import read_params, run_of
from a5core.rl.grpo import GRPOConfig, train_grpo
from a5core.run.checkpoint import Checkpointer, fingerprint
from a5core.run.history import timings
from a5core.stage import entry
from a5core.stage.training import (
    Snapshots,
    StageParams,
    finished_before,
    keep_outputs,
    put_back,
    training_stage,
    write_results,
)


def run_config(args, raw: dict) -> tuple[GRPOConfig, str]:
    """The run's config (from the params file's values `raw`) and stage name; with `--seed`, a seed replicate."""
    cfg = run_of(raw, GRPOConfig, "grpo", "grpo_runs", args.run, args.params)
    if args.seed is None:
        return cfg, f"grpo@{args.run}"
    return dataclasses.replace(cfg, seed=args.seed), f"grpo_replicate@{args.run}-{args.seed}"


def _train(ts, args, cfg: GRPOConfig, train: list[dict], fp: str, params: dict, name: str):
    """The GRPO run of the stage (`ts`), resumable from `args.scratch` (checkpoints keyed by `fp`)."""
    return train_grpo(
        ts.start.policy,
        ts.start.tokenizer,
        ts.start.backend,
        train_rows=train,
        cfg=cfg,
        pool=ts.pool,
        validate=ts.validate,
        history=ts.history,
        ckpt=Checkpointer(args.scratch, fp, cfg.checkpoint_every),
        initial=ts.initial,
        n_completions=ts.start.logging.completions,
        snapshot=Snapshots(f"checkpoints/{name}", ts.start.logging.save_every, ts.start.tokenizer, params),
        compute=ts.start.compute,
    )


def main() -> None:
    names = ("run", "model", "train", "validation", "out", "metrics", "live", "logs", "scratch", "record")
    args = entry.args(*names, seed=int)
    raw = read_params(args.params)  # read once: the run's section and the shared ones typed from it
    cfg, name = run_config(args, raw)
    shared = StageParams.of(raw, args.params)
    # Each run trains on `grpo.reward_fn` (default: its prompt's reward) and is validated with its own prompt and that
    # prompt's reward; a run with the validation section's prompt is validated with the validation section's
    # reward_fn (one pool when the two are the same).
    validation = shared.validation
    val_reward = validation.reward_fn if cfg.prompt == validation.prompt else REWARD_FNS[cfg.prompt]
    train = entry.rows(args.train, ["unique_id", "problem", "answer"])  # checked before the model loads
    with training_stage(
        args,
        name,
        params=shared,
        seed=cfg.seed,
        subset_size=cfg.eval_examples,
        initial_from=args.model,
        train_reward=cfg.train_reward,
        val_reward=val_reward,
        prompt=cfg.prompt,
    ) as ts:
        inputs = {"model": args.model, "train": args.train, "validation": args.validation}
        params = {"grpo": cfg, "train_reward": cfg.train_reward, "validation": ts.start.validation}
        params |= ts.start.numerics()
        fp = fingerprint(params, inputs)
        result = None if finished_before(args, fp) else _train(ts, args, cfg, train, fp, params, name)
    if result is None:
        return put_back(args, fp, name)
    ts.save(args.out, result.final, params, inputs)
    if ts.main:  # rank 0 of a distributed run writes the results
        write_results(args.metrics, result.final, ts.initial, protocol=ts.protocol, **result.details)
        ts.write_run_record(args.record, **timings(result.details))
    keep_outputs(args, fp)  # the resume state gives way to the outputs, kept until DVC has them
    if not ts.main:
        return
    print(
        f"{name}: validation accuracy {result.final.metrics['eval/accuracy']:.3f} "
        f"(best {result.details['best_accuracy']:.3f} at optimizer step {result.details['best_step']})"
    )


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
