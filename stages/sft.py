"""Stage sft@<run>: SFT on the first N traces of a fixed shuffle (or all filtered traces)."""
from a5core import stage
from a5core.artifacts import provenance, write_json
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import EvalConfig, GenerationConfig, from_dict, load_section, read_params
from a5core.generation import make_backend
from a5core.grader import GraderPool
from a5core.model_io import load_policy
from a5core.pipeline import make_eval_fn, save_policy, validation_protocol
from a5core.runlog import RunLog
from a5core.sft import SFTConfig, SFTRun, train_sft
from a5core.sft_data import select_examples


def main() -> None:
    a = stage.args("run", "model", "data", "validation", "out", "metrics", "logs", "scratch")
    params = read_params(a.params)
    cfg = load_section(SFTConfig, "sft", a.params)
    run = from_dict(SFTRun, params["sft_runs"].get(a.run), f"sft_runs.{a.run}")
    ev = load_section(EvalConfig, "validation", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    device = stage.setup_torch(cfg.seed)
    rows = select_examples(stage.rows(a.data, ["unique_id", "prompt", "response"]), run.examples, cfg.seed)
    val = stage.rows(a.validation, ["unique_id", "problem", "answer"])
    policy, tokenizer = load_policy(a.model, device)
    backend = make_backend(gen, a.model, policy, tokenizer, seed=ev.seed)
    inputs = {"model": a.model, "data": a.data, "validation": a.validation}
    ckpt = Checkpointer(a.scratch, fingerprint({"sft": cfg, "run": run, "validation": ev}, inputs), cfg.checkpoint_every)
    with GraderPool(ev.reward_fn, ev.grader_workers, ev.grader_timeout_s) as pool:
        final = train_sft(policy, tokenizer, rows, cfg, make_eval_fn(tokenizer, backend, val, ev, pool), ckpt, RunLog(a.logs))
    save_policy(policy, tokenizer, a.out, provenance(f"sft@{a.run}", {"sft": cfg, "run": run, "validation": ev}, inputs),
                (validation_protocol(ev, a.validation), final))
    write_json({**final, "examples": len(rows)}, a.metrics)
    ckpt.clear()
    print(f"sft@{a.run}: {len(rows)} examples, validation accuracy {final['accuracy']:.3f}")


if __name__ == "__main__":
    main()
