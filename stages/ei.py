"""Stage ei@<run>: Expert Iteration, `n_rounds` rounds with one named run's overrides on the shared `ei` params."""
from dataclasses import replace

from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet, write_text
from a5core.checkpoint import fingerprint
from a5core.config import load_run, load_section
from a5core.ei import ROLLOUT_SCHEMA, EIConfig, expert_iteration
from a5core.grader import GraderPool
from a5core.pipeline import make_eval_fn, save_policy, saved_validation, training_start, validation_protocol
from a5core.reports import ei_report
from a5core.runlog import RunLog
from a5core.sft import SFTConfig


def main() -> None:
    a = stage.args("run", "model", "train", "validation", "out", "rollouts", "metrics", "report", "logs", "scratch")
    cfg = load_run(EIConfig, "ei", "ei_runs", a.run, a.params)
    sft_cfg = load_section(SFTConfig, "sft", a.params)
    s = training_start(a, cfg.seed)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"ei": cfg, "sft": sft_cfg, "validation": s.ev}
    # n_rounds is left out so that a run killed in round 3 and restarted with more rounds still resumes.
    fp = fingerprint({**params, "ei": replace(cfg, n_rounds=0)}, inputs)
    protocol = validation_protocol(s.ev, a.validation)
    with GraderPool(s.ev.reward_fn, s.ev.grader_workers, s.ev.grader_timeout_s) as pool:
        rollouts, reports = expert_iteration(s.policy, s.tokenizer, s.backend, train, cfg, sft_cfg, s.ev, pool,
                                             make_eval_fn(s.tokenizer, s.backend, s.val, s.ev, pool), a.scratch, fp, RunLog(a.logs),
                                             initial=saved_validation(a.model, protocol))
    prov = provenance(f"ei@{a.run}", params, inputs)
    write_parquet(rollouts, a.rollouts, prov, ROLLOUT_SCHEMA)
    save_policy(s.policy, s.tokenizer, a.out, prov, (protocol, reports[-1]))
    best, final = max(reports, key=lambda r: r["accuracy"]), reports[-1]
    write_json({"accuracy": final["accuracy"], "format_rate": final["format_rate"], "mean_token_entropy": final["mean_token_entropy"],
                "mean_response_length": final["mean_response_length"], "initial_accuracy": reports[0]["accuracy"],
                "rounds": cfg.n_rounds, "best_accuracy": best["accuracy"], "best_round": best["round"]}, a.metrics)
    write_text(ei_report(a.run, reports), a.report)
    stage.remove(a.scratch)  # resume state is for crashes only: a later run may run other code
    print(f"ei@{a.run}: {cfg.n_rounds} rounds, validation accuracy {reports[0]['accuracy']:.3f} -> {final['accuracy']:.3f}")


if __name__ == "__main__":
    main()
