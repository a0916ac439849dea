"""Stage baseline_eval: zero-shot evaluation of the fetched model on the validation set."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet, write_text
from a5core.config import EvalConfig, GenerationConfig, load_section
from a5core.evaluation import GENERATION_SCHEMA, evaluate_policy, storable
from a5core.generation import make_backend
from a5core.grader import GraderPool
from a5core.model_io import load_policy
from a5core.reports import eval_case_report


def main() -> None:
    a = stage.args("model", "validation", "generations", "metrics", "report")
    cfg = load_section(EvalConfig, "eval", a.params)
    gen = load_section(GenerationConfig, "generation", a.params)
    device = stage.setup_torch(cfg.seed)
    rows = stage.rows(a.validation, ["unique_id", "problem", "answer"], cfg.n_examples)
    policy, tokenizer = load_policy(a.model, device)
    backend = make_backend(gen, a.model, policy, tokenizer, seed=cfg.seed)
    with GraderPool(cfg.reward_fn, cfg.grader_workers, cfg.grader_timeout_s) as pool:
        records, metrics = evaluate_policy(policy, tokenizer, backend, rows, cfg, pool)
    prov = provenance("baseline_eval", {"eval": cfg, "generation": gen}, {"model": a.model, "validation": a.validation})
    write_parquet(storable(records), a.generations, prov, GENERATION_SCHEMA)
    write_json(metrics, a.metrics)
    write_text(eval_case_report("Zero-shot baseline", records, metrics), a.report)
    print(f"baseline accuracy {metrics['accuracy']:.3f}, format rate {metrics['format_rate']:.3f}")


if __name__ == "__main__":
    main()
