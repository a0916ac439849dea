"""Stage sft@<run>: SFT on the first N traces of a fixed shuffle (or all filtered traces); with `--seed`, stage
sft_replicate@<run>-<seed>: the same run with sft.seed replaced, which picks and orders its examples
(a5core/report/replicates.py)."""

import dataclasses
from pathlib import Path

from a5core.config.sections import SFTRun, entry_of, read_params, section_of
from a5core.data.sft_traces import select_examples
from a5core.rl.sft import SFTConfig, train_sft
from a5core.run.checkpoint import Checkpointer, fingerprint
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


def _train(ts, args, cfg: SFTConfig, rows: list[dict], fp: str, params: dict, name: str):
    """The SFT run of the stage (`ts`), resumable from `args.scratch` (checkpoints keyed by `fp`)."""
    return train_sft(
        ts.start.policy,
        ts.start.tokenizer,
        rows=rows,
        cfg=cfg,
        validate=ts.validate,
        history=ts.history,
        initial=ts.initial,
        ckpt=Checkpointer(args.scratch, fp, cfg.checkpoint_every),
        n_completions=ts.start.logging.completions,
        snapshot=Snapshots(f"checkpoints/{name}", ts.start.logging.save_every, ts.start.tokenizer, params),
        compute=ts.start.compute,
    )


def main() -> None:
    names = ("run", "model", "data", "validation", "initial", "out", "metrics", "live", "logs", "scratch", "record")
    args = entry.args(*names, seed=int)
    raw = read_params(args.params)  # read once: the run's sections and the shared ones typed from it
    cfg, shared = section_of(raw, SFTConfig, "sft", args.params), StageParams.of(raw, args.params)
    if args.seed is not None:  # a seed replicate of the run
        cfg = dataclasses.replace(cfg, seed=args.seed)
    run = entry_of(raw, SFTRun, "sft_runs", args.run, args.params)
    if Path(args.data).is_dir():  # the data folder (a replicate's stage cannot name the run's file): its traces in it
        args.data = str(Path(args.data) / f"{run.data}.parquet")
    traces = entry.rows(args.data, ["unique_id", "prompt", "response"])  # checked before the model loads
    rows = select_examples(traces, run.examples, cfg.seed)
    name = f"sft@{args.run}" if args.seed is None else f"sft_replicate@{args.run}-{args.seed}"
    with training_stage(
        args, name, params=shared, seed=cfg.seed, subset_size=cfg.eval_examples, initial_from=args.initial
    ) as ts:
        inputs = {"model": args.model, "data": args.data, "validation": args.validation}
        params = {"sft": cfg, "run": run, "validation": ts.start.validation, **ts.start.numerics()}
        fp = fingerprint(params, inputs)
        result = None if finished_before(args, fp) else _train(ts, args, cfg, rows, fp, params, name)
    if result is None:
        return put_back(args, fp, name)
    final = result.final
    ts.save(args.out, final, params, inputs)
    if ts.main:  # rank 0 of a distributed run writes the results
        write_results(args.metrics, final, ts.initial, protocol=ts.protocol, examples=len(rows), **result.details)
        ts.write_run_record(args.record)
    keep_outputs(args, fp)  # the resume state gives way to the outputs, kept until DVC has them
    if not ts.main:
        return
    print(
        f"{name}: {len(rows)} examples, validation accuracy {final.metrics['eval/accuracy']:.3f} "
        f"[{final.metrics['eval/accuracy_lo']:.3f}, {final.metrics['eval/accuracy_hi']:.3f}]"
    )


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
