"""Stage baseline_eval: zero-shot evaluation of the fetched model on the validation set (`eval` section), and the
base model's validation under the `validation` protocol, which SFT runs start their curves and paired changes from."""

import dataclasses

from a5core.base.artifacts import provenance, write_json, write_parquet, write_text
from a5core.base.records import GENERATION_SCHEMA
from a5core.base.run_record import write_run_record
from a5core.config.sections import EvalConfig, GenerationConfig, ModelConfig, read_params, section_of
from a5core.generation import make_backend
from a5core.model.compute import Compute
from a5core.model.loading import load_policy
from a5core.run.evaluation import evaluate_policy
from a5core.run.stage_reports import eval_case_report
from a5core.stage import entry
from a5core.stage.training import grader_pool, validation_protocol, validation_record, write_results


def main() -> None:
    args = entry.args("model", "validation", "generations", "metrics", "breakdown", "report", "initial", "record")
    raw = read_params(args.params)  # read once: its sections typed from it
    cfg = section_of(raw, EvalConfig, "eval", args.params)
    val_cfg = section_of(raw, EvalConfig, "validation", args.params)
    gen = section_of(raw, GenerationConfig, "generation", args.params)
    rows = entry.rows(args.validation, ["unique_id", "problem", "answer"])
    pool = grader_pool(cfg).start()  # its imports overlap the model load
    model = section_of(raw, ModelConfig, "model", args.params)
    device = entry.setup_torch(cfg.seed)
    compute = Compute.of(model, device, generation=gen)  # its precisions and LM-head chunking (no training: no plan)
    policy, tokenizer = load_policy(args.model, device, model.dtype)
    backend = make_backend(
        gen, args.model, policy, tokenizer, seed=cfg.seed, bf16=compute.generation_bf16, cut=compute.cut
    )
    with pool:
        result = evaluate_policy(policy, tokenizer, backend, rows, cfg, pool, cut=compute.cut)
    # The same settings measure the same thing (every request is seeded): evaluate again only if they differ.
    if val_cfg == cfg:
        base = result
    else:
        with grader_pool(val_cfg) as val_pool:
            base = evaluate_policy(policy, tokenizer, backend, rows, val_cfg, val_pool, cut=compute.cut)
    protocol = validation_protocol(val_cfg, args.validation, compute.generation_bf16)
    write_json(validation_record(base, protocol, shown=0), args.initial)  # the SFT runs' start: scores only
    prov = provenance(
        "baseline_eval", {"eval": cfg, "generation": gen}, {"model": args.model, "validation": args.validation}
    )
    write_parquet([s.row() for s in result.samples], args.generations, prov, GENERATION_SCHEMA)
    write_results(args.metrics, result)
    write_json({**result.metrics, **result.breakdown}, args.breakdown)
    write_text(eval_case_report("Zero-shot baseline", result.samples, result.metrics, result.breakdown), args.report)
    write_run_record(args.record, "baseline_eval", autocast=dataclasses.asdict(compute.autocast))
    m = result.metrics
    print(
        f"baseline accuracy {m['eval/accuracy']:.3f} [{m['eval/accuracy_lo']:.3f}, {m['eval/accuracy_hi']:.3f}], "
        f"format rate {m['eval/format_rate']:.3f}"
    )


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
