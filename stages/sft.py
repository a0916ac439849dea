"""Stage sft@<run>: SFT on the first N traces of a fixed shuffle (or all filtered traces)."""

from a5core import stage
from a5core.artifacts import provenance
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import EvalConfig, SFTRun, from_dict, load_section, read_params
from a5core.history import RunHistory
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
from a5core.runinfo import write_run_record
from a5core.sft import SFTConfig, train_sft
from a5core.sft_data import select_examples


def main() -> None:
    args = stage.args(
        "run", "model", "data", "validation", "initial", "out", "metrics", "live", "logs", "scratch", "record"
    )
    cfg = load_section(SFTConfig, "sft", args.params)
    run = from_dict(SFTRun, read_params(args.params)["sft_runs"][args.run] or {}, f"sft_runs.{args.run}")
    pool = grader_pool(
        load_section(EvalConfig, "validation", args.params)
    ).start()  # its imports overlap the model load
    traces = stage.rows(args.data, ["unique_id", "prompt", "response"])  # checked before the model loads
    start = training_start(args, cfg.seed)
    rows = select_examples(traces, run.examples, cfg.seed)
    inputs = {"model": args.model, "data": args.data, "validation": args.validation}
    params = {"sft": cfg, "run": run, "validation": start.validation, **start.numerics()}
    ckpt = Checkpointer(args.scratch, fingerprint(params, inputs), cfg.checkpoint_every)
    protocol = validation_protocol(start.validation, args.validation)
    history = RunHistory(args.live, args.logs, name=f"sft@{args.run}", total_steps=0, cfg=start.logging)
    with history, pool:
        validate = Validator(start, pool, subset_size=cfg.eval_examples)
        initial = initial_validation(args.initial, protocol, validate, start.policy)
        final = train_sft(
            start.policy,
            start.tokenizer,
            rows=rows,
            cfg=cfg,
            validate=validate,
            history=history,
            initial=initial,
            ckpt=ckpt,
            n_completions=start.logging.completions,
            snapshot=Snapshots(f"checkpoints/sft@{args.run}", start.logging.save_every, start.tokenizer, params),
        )
    prov = provenance(f"sft@{args.run}", params, inputs)
    save_policy(start.policy, start.tokenizer, args.out, prov, validation_record(final, protocol))
    write_results(args.metrics, final, initial, examples=len(rows), steps=history.optimizer_steps)
    ckpt.clear()
    write_run_record(args.record, f"sft@{args.run}")
    print(
        f"sft@{args.run}: {len(rows)} examples, validation accuracy {final.metrics['accuracy']:.3f} "
        f"[{final.metrics['accuracy_lo']:.3f}, {final.metrics['accuracy_hi']:.3f}]"
    )


if __name__ == "__main__":
    stage.run(main)  # the project's own errors end in one line
