"""Stage ei_round_<k>@<run>: Expert Iteration round k of one named run (overrides on the shared `ei` params).

Round k trains the model of round k-1 (round 1: `ei.init_policy`) and extends round k-1's history
(`--history`, its rounds.csv; round 1 starts the history with the initial policy's validation metrics).
"""
import sys

from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet, write_text
from a5core.checkpoint import fingerprint
from a5core.config import load_run, load_section
from a5core.ei import ROLLOUT_SCHEMA, EIConfig, ei_round, history_row, round_metrics
from a5core.grader import GraderPool
from a5core.pipeline import make_eval_fn, save_policy, saved_validation, training_start, validation_protocol
from a5core.reports import ei_report
from a5core.runlog import RunLog, read_log
from a5core.sft import SFTConfig


def main() -> None:
    a = stage.args("run", "model", "train", "validation", "out", "rollouts", "metrics", "report", "logs", "scratch", round=int, history=str)
    if a.round is None or a.round < 1 or (a.round == 1) != (a.history is None):
        sys.exit(f"ei_round: --round must be >= 1, and --history (round k-1's rounds.csv) given for every round but the first "
                 f"(got --round {a.round}, --history {a.history})")
    history = read_log(a.history) if a.history else []
    if a.history and [int(r["round"]) for r in history] != list(range(a.round)):
        sys.exit(f"ei_round {a.round}: {a.history} should hold rounds 0..{a.round - 1}, not {[r['round'] for r in history]}")
    cfg = load_run(EIConfig, "ei", "ei_runs", a.run, a.params)
    sft_cfg = load_section(SFTConfig, "sft", a.params)
    s = training_start(a, cfg.seed * 1000 + a.round)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"ei": cfg, "sft": sft_cfg, "validation": s.ev, "round": a.round}
    protocol = validation_protocol(s.ev, a.validation)
    log = RunLog(a.logs)
    with GraderPool(s.ev.reward_fn, s.ev.grader_workers, s.ev.grader_timeout_s) as pool:
        evaluate_fn = make_eval_fn(s.tokenizer, s.backend, s.val, s.ev, pool)
        if not history:  # round 0: the initial policy, on the same validation protocol (saved with it when it was trained)
            history = [history_row(0, saved_validation(a.model, protocol) or evaluate_fn(s.policy, 0))]
        rollouts, report, final = ei_round(s.policy, s.tokenizer, s.backend, train, a.round, cfg, sft_cfg, s.ev, pool, evaluate_fn,
                                           a.scratch, fingerprint(params, inputs), log)
    history.append(history_row(a.round, final, report))
    for row in history:
        log("rounds", row)
    prov = provenance(f"ei_round_{a.round}@{a.run}", params, inputs)
    write_parquet(rollouts, a.rollouts, prov, ROLLOUT_SCHEMA)
    save_policy(s.policy, s.tokenizer, a.out, prov, (protocol, final))
    write_json(round_metrics(history), a.metrics)
    write_text(ei_report(a.run, history, report), a.report)
    stage.remove(a.scratch)  # resume state is for crashes only: a later run may run other code
    print(f"ei_round_{a.round}@{a.run}: kept {report['kept']}/{report['rollouts']} rollouts, validation accuracy "
          f"{history[-2]['accuracy']:.3f} -> {final['accuracy']:.3f} (round 0: {history[0]['accuracy']:.3f})")


if __name__ == "__main__":
    main()
