"""Stage grpo@<run>: GRPO with one named run's overrides on the shared `grpo` params."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import load_run
from a5core.grader import GraderPool
from a5core.grpo import GRPOConfig, train_grpo
from a5core.pipeline import make_eval_fn, save_policy, saved_validation, training_start, validation_protocol
from a5core.prompts import REWARD_FNS
from a5core.runlog import RunLog


def main() -> None:
    a = stage.args("run", "model", "train", "validation", "out", "metrics", "logs", "examples", "scratch")
    cfg = load_run(GRPOConfig, "grpo", "grpo_runs", a.run, a.params)  # validated here, before any work
    s = training_start(a, cfg.seed)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"grpo": cfg, "validation": s.ev}
    ckpt = Checkpointer(a.scratch, fingerprint(params, inputs), cfg.checkpoint_every)
    protocol = validation_protocol(s.ev, a.validation)
    examples: list = []
    # Training rollouts use the run's prompt and its reward; validation always uses the validation prompt and grader.
    with GraderPool(REWARD_FNS[cfg.prompt], s.ev.grader_workers, s.ev.grader_timeout_s) as pool, \
            GraderPool(s.ev.reward_fn, s.ev.grader_workers, s.ev.grader_timeout_s) as eval_pool:
        summary = train_grpo(s.policy, s.tokenizer, s.backend, train, cfg, s.ev, pool, make_eval_fn(s.tokenizer, s.backend, s.val, s.ev, eval_pool),
                             ckpt, RunLog(a.logs), examples, initial=saved_validation(a.model, protocol))
    prov = provenance(f"grpo@{a.run}", params, inputs)
    write_parquet(examples, a.examples, prov)
    save_policy(s.policy, s.tokenizer, a.out, prov, (protocol, summary))
    write_json(summary, a.metrics)
    ckpt.clear()
    print(f"grpo@{a.run}: validation accuracy {summary['accuracy']:.3f} (best {summary['best_accuracy']:.3f} at step {summary['best_step']})")


if __name__ == "__main__":
    main()
