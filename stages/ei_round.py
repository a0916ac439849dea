"""Stage ei_round_<k>@<run>: Expert Iteration round k of one named run (overrides on the shared `ei` params); with
`--seed`, stage ei_replicate_<k>@<run>-<seed>: the same round of the run with ei.seed replaced
(a5core/report/replicates.py).

Round k trains the model of round k-1 (round 1: `ei.init_policy`) and extends round k-1's history (`--history`, its
rounds.csv). `--initial` is the EI run's starting policy's full validation (round 1: that model's folder; round k:
the copy round k-1 wrote), against which every round reports its paired change.
"""

import dataclasses
import sys

from a5core.base.artifacts import provenance, write_json, write_parquet, write_text
from a5core.base.records import ROLLOUT_SCHEMA
from a5core.base.seeds import derive_seed
from a5core.config.sections import read_params, run_of, section_of
from a5core.rl.ei import EIConfig, ei_round, history_row
from a5core.rl.sft import SFTConfig
from a5core.run.checkpoint import fingerprint
from a5core.run.history import read_log, write_csv
from a5core.run.stage_reports import ei_report
from a5core.stage import entry
from a5core.stage.training import (
    StageParams,
    finished_before,
    keep_outputs,
    put_back,
    training_stage,
    validation_record,
    write_results,
)


def _history(args) -> list[dict]:
    if args.round is None or args.round < 1 or (args.round == 1) != (args.history is None):
        sys.exit(
            f"ei_round: --round must be >= 1, and --history (round k-1's rounds.csv) given for every round but "
            f"the first (got --round {args.round}, --history {args.history})"
        )
    history = read_log(args.history) if args.history else []
    if args.history and [int(r["round"]) for r in history] != list(range(args.round)):
        sys.exit(
            f"ei_round {args.round}: {args.history} should hold rounds 0..{args.round - 1}, "
            f"not {[r['round'] for r in history]}"
        )
    return history


PATHS = (
    "record",
    "run",
    "model",
    "initial",
    "train",
    "validation",
    "out",
    "rollouts",
    "metrics",
    "report",
    "live",
    "logs",
    "initial_out",
    "scratch",
)


def write_outputs(args, ts, rounds: list[dict], result, prov: dict) -> None:
    """The round's history, rollouts, model (with its validation), starting-policy record, metrics and report."""
    rounds.append(history_row(args.round, result.final.metrics, result.details))
    record = validation_record(result.final, ts.protocol, ts.start.logging.completions)
    ts.save_model(args.out, prov, record)  # every rank calls it
    if not ts.main:  # rank 0 of a distributed run writes the results
        return
    write_csv(rounds, f"{args.logs}/rounds.csv")
    write_parquet([r.row() for r in result.rollouts], args.rollouts, prov, ROLLOUT_SCHEMA)
    write_json(ts.initial, args.initial_out)
    kept = result.details["count/kept"]
    write_results(args.metrics, result.final, ts.initial, protocol=ts.protocol, round=args.round, kept=kept)
    write_text(ei_report(args.run, rounds, result.details), args.report)


def _train(ts, args, cfg: EIConfig, sft_cfg: SFTConfig, train: list[dict], fp: str):
    """The EI round of the stage (`ts`), resumable from `args.scratch` (its rollouts and SFT keyed by `fp`)."""
    return ei_round(
        ts.start.policy,
        ts.start.tokenizer,
        ts.start.backend,
        train_rows=train,
        round_idx=args.round,
        cfg=cfg,
        sft_cfg=sft_cfg,
        pool=ts.pool,
        validate=ts.validate,
        history=ts.history,
        scratch=args.scratch,
        fp=fp,
        n_completions=ts.start.logging.completions,
        compute=ts.start.compute,
    )


def main() -> None:
    args = entry.args(*PATHS, round=int, history=str, seed=int)
    rounds = _history(args)
    raw = read_params(args.params)  # read once: the run's sections and the shared ones typed from it
    cfg = run_of(raw, EIConfig, "ei", "ei_runs", args.run, args.params)
    sft_cfg, shared = section_of(raw, SFTConfig, "sft", args.params), StageParams.of(raw, args.params)
    train = entry.rows(args.train, ["unique_id", "problem", "answer"])  # checked before the model loads
    name = f"ei_round_{args.round}@{args.run}"
    if args.seed is not None:  # a seed replicate of the run
        cfg, name = dataclasses.replace(cfg, seed=args.seed), f"ei_replicate_{args.round}@{args.run}-{args.seed}"
    # the rollouts are graded by `ei.reward_fn` (default: the prompt's reward), validation by `validation.reward_fn`
    with training_stage(
        args,
        name,
        params=shared,
        seed=derive_seed(cfg.seed, "ei_round", args.round),
        subset_size=sft_cfg.eval_examples,
        initial_from=args.initial,
        train_reward=cfg.train_reward,
    ) as ts:
        inputs = {"model": args.model, "train": args.train, "validation": args.validation}
        params = {"ei": cfg, "train_reward": cfg.train_reward, "sft": sft_cfg, "validation": ts.start.validation}
        params |= {"round": args.round, **ts.start.numerics()}
        rounds = rounds or [history_row(0, ts.initial["metrics"])]  # round 0: the initial policy
        fp = fingerprint(params, inputs)
        result = None if finished_before(args, fp) else _train(ts, args, cfg, sft_cfg, train, fp)
    if result is None:
        return put_back(args, fp, name)
    write_outputs(args, ts, rounds, result, provenance(name, params, inputs))
    if ts.main:
        ts.write_run_record(args.record)
    keep_outputs(args, fp)  # the resume state gives way to the outputs, kept until DVC has them
    if not ts.main:
        return
    kept, rollouts = result.details["count/kept"], result.details["count/rollouts"]
    print(
        f"{name}: kept {kept}/{rollouts} rollouts, validation accuracy {rounds[-2]['eval/accuracy']:.3f} -> "
        f"{result.final.metrics['eval/accuracy']:.3f} (round 0: {rounds[0]['eval/accuracy']:.3f})"
    )


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
