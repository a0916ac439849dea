"""Stage ei_round_<k>: one Expert Iteration round starting from the previous round's policy."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import EvalConfig, GenerationConfig, load_section
from a5core.ei import ROLLOUT_SCHEMA, EIConfig, ei_round
from a5core.generation import make_backend
from a5core.grader import GraderPool
from a5core.model_io import load_policy
from a5core.pipeline import make_eval_fn, save_policy
from a5core.runlog import RunLog
from a5core.sft import SFTConfig


def main() -> None:
    a = stage.args("model", "train", "validation", "out", "rollouts", "metrics", "logs", "scratch", round=int)
    cfg = load_section(EIConfig, "ei", a.params)
    sft_cfg = load_section(SFTConfig, "sft", a.params)
    ev = load_section(EvalConfig, "eval", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    device = stage.setup_torch(cfg.seed + a.round)
    policy, tokenizer = load_policy(a.model, device)
    backend = make_backend(gen, a.model, policy, tokenizer, seed=ev.seed)
    train = stage.rows(a.train, ["unique_id", "problem", "answer"])
    val = stage.rows(a.validation, ["unique_id", "problem", "answer"])
    inputs = {"model": a.model, "train": a.train, "validation": a.validation}
    params = {"ei": cfg, "sft": sft_cfg, "eval": ev, "round": a.round}
    ckpt = Checkpointer(a.scratch, fingerprint(params, inputs), sft_cfg.checkpoint_every)
    with GraderPool(ev.reward_fn, ev.grader_workers, ev.grader_timeout_s) as pool:
        rollouts, report, final = ei_round(policy, tokenizer, backend, train, a.round, cfg, sft_cfg, ev, pool,
                                           make_eval_fn(tokenizer, backend, val, ev, pool), ckpt, RunLog(a.logs))
    prov = provenance(f"ei_round_{a.round}", params, inputs)
    write_parquet(rollouts, a.rollouts, prov, ROLLOUT_SCHEMA)
    save_policy(policy, tokenizer, a.out, prov)
    write_json({"round": a.round, **final, **report}, a.metrics)
    ckpt.clear()
    print(f"EI round {a.round}: kept {report['kept']}/{report['rollouts']}, validation accuracy {final['accuracy']:.3f}")


if __name__ == "__main__":
    main()
