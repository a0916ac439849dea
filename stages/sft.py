"""Stage sft@<run>: SFT on the first N traces of a fixed shuffle (or all filtered traces)."""
from a5core import stage
from a5core.artifacts import provenance, write_json
from a5core.checkpoint import Checkpointer, fingerprint
from a5core.config import from_dict, load_section, read_params
from a5core.grader import GraderPool
from a5core.pipeline import make_eval_fn, save_policy, training_start, validation_protocol
from a5core.runlog import RunLog
from a5core.sft import SFTConfig, SFTRun, train_sft
from a5core.sft_data import select_examples


def main() -> None:
    a = stage.args("run", "model", "data", "validation", "out", "metrics", "logs", "scratch")
    cfg = load_section(SFTConfig, "sft", a.params)
    run = from_dict(SFTRun, read_params(a.params)["sft_runs"].get(a.run), f"sft_runs.{a.run}")
    s = training_start(a, cfg.seed)
    rows = select_examples(stage.rows(a.data, ["unique_id", "prompt", "response"]), run.examples, cfg.seed)
    inputs = {"model": a.model, "data": a.data, "validation": a.validation}
    params = {"sft": cfg, "run": run, "validation": s.ev}
    ckpt = Checkpointer(a.scratch, fingerprint(params, inputs), cfg.checkpoint_every)
    with GraderPool(s.ev.reward_fn, s.ev.grader_workers, s.ev.grader_timeout_s) as pool:
        final = train_sft(s.policy, s.tokenizer, rows, cfg, make_eval_fn(s.tokenizer, s.backend, s.val, s.ev, pool), ckpt, RunLog(a.logs))
    save_policy(s.policy, s.tokenizer, a.out, provenance(f"sft@{a.run}", params, inputs), (validation_protocol(s.ev, a.validation), final))
    write_json({**final, "examples": len(rows)}, a.metrics)
    ckpt.clear()
    print(f"sft@{a.run}: {len(rows)} examples, validation accuracy {final['accuracy']:.3f}")


if __name__ == "__main__":
    main()
