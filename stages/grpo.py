"""Stage grpo@<run>: GRPO with one named run's overrides on the shared `grpo` params."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import EvalConfig, GenerationConfig, load_section, read_params
from a5core.generation import make_backend
from a5core.grader import GraderPool
from a5core.grpo import GRPOConfig, train_grpo
from a5core.model_io import load_policy
from a5core.pipeline import make_eval_fn, save_policy
from a5core.prompts import REWARD_FNS
from a5core.runlog import RunLog


def main() -> None:
    a = stage.args("run", "model", "train", "validation", "out", "metrics", "logs", "examples", "scratch")
    cfg = load_section(GRPOConfig, "grpo", a.params, overrides=read_params(a.params)["grpo_runs"][a.run])  # validated here
    ev = load_section(EvalConfig, "eval", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    device = stage.setup_torch(cfg.seed)
    policy, tokenizer = load_policy(a.model, device)
    backend = make_backend(gen, a.model, policy, tokenizer, seed=cfg.seed)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    val = stage.rows(a.validation, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"grpo": cfg, "eval": ev}
    ckpt = Checkpointer(a.scratch, fingerprint(params, inputs), cfg.checkpoint_every)
    examples: list = []
    # Training rollouts use the run's prompt and its reward; validation always uses the eval prompt and grader.
    with GraderPool(REWARD_FNS[cfg.prompt], ev.grader_workers, ev.grader_timeout_s) as pool, \
            GraderPool(ev.reward_fn, ev.grader_workers, ev.grader_timeout_s) as eval_pool:
        summary = train_grpo(policy, tokenizer, backend, train, cfg, ev, pool, make_eval_fn(tokenizer, backend, val, ev, eval_pool),
                             ckpt, RunLog(a.logs), examples)
    prov = provenance(f"grpo@{a.run}", params, inputs)
    write_parquet(examples, a.examples, prov)
    save_policy(policy, tokenizer, a.out, prov)
    write_json(summary, a.metrics)
    ckpt.clear()
    print(f"grpo@{a.run}: validation accuracy {summary['accuracy']:.3f} (best {summary['best_accuracy']:.3f} at step {summary['best_step']})")


if __name__ == "__main__":
    main()
