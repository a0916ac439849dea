"""Stage grpo@<run>: GRPO with one named run's overrides on the shared `grpo` params."""

from a5core import stage
from a5core.artifacts import provenance
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import EvalConfig, load_run, load_section
from a5core.grpo import GRPOConfig, train_grpo
from a5core.history import RunHistory, timings
from a5core.pipeline import (
    Snapshots,
    Validator,
    grader_pool,
    initial_validation,
    save_policy,
    training_start,
    validation_protocol,
    validation_record,
    write_results,
)
from a5core.prompts import REWARD_FNS
from a5core.runinfo import write_run_record


def main() -> None:
    args = stage.args("run", "model", "train", "validation", "out", "metrics", "live", "logs", "scratch", "record")
    cfg = load_run(GRPOConfig, "grpo", "grpo_runs", args.run, args.params)
    # Each run trains on `grpo.reward_fn` (default: its prompt's reward) and is validated with its own prompt and that
    # prompt's reward; a run with the validation section's prompt is validated with the validation section's
    # reward_fn (one pool when the two are the same).
    validation = load_section(EvalConfig, "validation", args.params)
    val_reward = validation.reward_fn if cfg.prompt == validation.prompt else REWARD_FNS[cfg.prompt]
    pool = grader_pool(validation, cfg.train_reward).start()  # its imports overlap the model load
    vpool = pool if val_reward == cfg.train_reward else grader_pool(validation, val_reward).start()
    train = stage.rows(args.train, ["unique_id", "problem", "answer"])  # checked before the model loads
    start = training_start(args, cfg.seed)
    inputs = {"model": args.model, "train": args.train, "validation": args.validation}
    params = {"grpo": cfg, "train_reward": cfg.train_reward, "validation": start.validation, **start.numerics()}
    ckpt = Checkpointer(args.scratch, fingerprint(params, inputs), cfg.checkpoint_every)
    protocol = validation_protocol(start.validation, args.validation, cfg.prompt)
    history = RunHistory(args.live, args.logs, name=f"grpo@{args.run}", total_steps=0, cfg=start.logging)
    with history, pool, vpool:
        validate = Validator(start, vpool, subset_size=cfg.eval_examples, prompt=cfg.prompt)
        initial = initial_validation(args.model, protocol, validate, start.policy)
        summary = train_grpo(
            start.policy,
            start.tokenizer,
            start.backend,
            train_rows=train,
            cfg=cfg,
            pool=pool,
            validate=validate,
            history=history,
            ckpt=ckpt,
            initial=initial,
            n_completions=start.logging.completions,
            snapshot=Snapshots(f"checkpoints/grpo@{args.run}", start.logging.save_every, start.tokenizer, params),
        )
    final = summary.pop("final")
    save_policy(
        start.policy,
        start.tokenizer,
        args.out,
        provenance(f"grpo@{args.run}", params, inputs),
        validation_record(final, protocol),
    )
    write_results(args.metrics, final, initial, **summary)
    ckpt.clear()
    write_run_record(args.record, f"grpo@{args.run}", **timings(summary))
    print(
        f"grpo@{args.run}: validation accuracy {final.metrics['accuracy']:.3f} (best {summary['best_accuracy']:.3f} "
        f"at optimizer step {summary['best_step']})"
    )


if __name__ == "__main__":
    stage.run(main)  # the project's own errors end in one line
