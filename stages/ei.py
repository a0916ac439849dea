"""Stage ei@<run>: Expert Iteration, `n_rounds` rounds with one named run's overrides on the shared `ei` params."""
from dataclasses import replace

from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet, write_text
from a5core.checkpoint import fingerprint
from a5core.config import EvalConfig, GenerationConfig, load_run, load_section
from a5core.ei import ROLLOUT_SCHEMA, EIConfig, expert_iteration
from a5core.generation import make_backend
from a5core.grader import GraderPool
from a5core.model_io import load_policy
from a5core.pipeline import make_eval_fn, save_policy, saved_validation, validation_protocol
from a5core.reports import ei_report
from a5core.runlog import RunLog
from a5core.sft import SFTConfig


def main() -> None:
    a = stage.args("run", "model", "train", "validation", "out", "rollouts", "metrics", "report", "logs", "scratch")
    cfg = load_run(EIConfig, "ei", "ei_runs", a.run, a.params)
    sft_cfg = load_section(SFTConfig, "sft", a.params)
    ev = load_section(EvalConfig, "validation", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    device = stage.setup_torch(cfg.seed)
    policy, tokenizer = load_policy(a.model, device)
    backend = make_backend(gen, a.model, policy, tokenizer, seed=ev.seed)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    val = stage.rows(a.validation, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"ei": cfg, "sft": sft_cfg, "validation": ev}
    # n_rounds is left out so that a run killed in round 3 and restarted with more rounds still resumes.
    fp = fingerprint({**params, "ei": replace(cfg, n_rounds=0)}, inputs)
    protocol = validation_protocol(ev, a.validation)
    with GraderPool(ev.reward_fn, ev.grader_workers, ev.grader_timeout_s) as pool:
        rollouts, reports = expert_iteration(policy, tokenizer, backend, train, cfg, sft_cfg, ev, pool,
                                             make_eval_fn(tokenizer, backend, val, ev, pool), a.scratch, fp, RunLog(a.logs),
                                             initial=saved_validation(a.model, protocol))
    prov = provenance(f"ei@{a.run}", params, inputs)
    write_parquet(rollouts, a.rollouts, prov, ROLLOUT_SCHEMA)
    save_policy(policy, tokenizer, a.out, prov, (protocol, reports[-1]))
    best = max(reports, key=lambda r: r["accuracy"])
    final = reports[-1]
    write_json({"accuracy": final["accuracy"], "format_rate": final["format_rate"], "mean_token_entropy": final["mean_token_entropy"],
                "mean_response_length": final["mean_response_length"], "initial_accuracy": reports[0]["accuracy"],
                "rounds": cfg.n_rounds, "best_accuracy": best["accuracy"], "best_round": best["round"]}, a.metrics)
    write_text(ei_report(a.run, reports), a.report)
    stage.remove(a.scratch)  # resume state is for crashes only: a later run may run other code
    print(f"ei@{a.run}: {cfg.n_rounds} rounds, validation accuracy {reports[0]['accuracy']:.3f} -> {final['accuracy']:.3f}")


if __name__ == "__main__":
    main()
