"""Stage grpo@<run>: GRPO with one named run's overrides on the shared `grpo` params."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import EvalConfig, GenerationConfig, load_run, load_section
from a5core.generation import make_backend
from a5core.grader import GraderPool
from a5core.grpo import GRPOConfig, train_grpo
from a5core.model_io import load_policy
from a5core.pipeline import make_eval_fn, save_policy, saved_validation, validation_protocol
from a5core.prompts import REWARD_FNS
from a5core.runlog import RunLog


def main() -> None:
    a = stage.args("run", "model", "train", "validation", "out", "metrics", "logs", "examples", "scratch")
    cfg = load_run(GRPOConfig, "grpo", "grpo_runs", a.run, a.params)  # validated here
    ev = load_section(EvalConfig, "validation", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    device = stage.setup_torch(cfg.seed)
    policy, tokenizer = load_policy(a.model, device)
    backend = make_backend(gen, a.model, policy, tokenizer, seed=cfg.seed)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    val = stage.rows(a.validation, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"grpo": cfg, "validation": ev}
    ckpt = Checkpointer(a.scratch, fingerprint(params, inputs), cfg.checkpoint_every)
    protocol = validation_protocol(ev, a.validation)
    examples: list = []
    # Training rollouts use the run's prompt and its reward; validation always uses the validation prompt and grader.
    with GraderPool(REWARD_FNS[cfg.prompt], ev.grader_workers, ev.grader_timeout_s) as pool, \
            GraderPool(ev.reward_fn, ev.grader_workers, ev.grader_timeout_s) as eval_pool:
        summary = train_grpo(policy, tokenizer, backend, train, cfg, ev, pool, make_eval_fn(tokenizer, backend, val, ev, eval_pool),
                             ckpt, RunLog(a.logs), examples, initial=saved_validation(a.model, protocol))
    prov = provenance(f"grpo@{a.run}", params, inputs)
    write_parquet(examples, a.examples, prov)
    save_policy(policy, tokenizer, a.out, prov, (protocol, summary))
    write_json(summary, a.metrics)
    ckpt.clear()
    print(f"grpo@{a.run}: validation accuracy {summary['accuracy']:.3f} (best {summary['best_accuracy']:.3f} at step {summary['best_step']})")


if __name__ == "__main__":
    main()
