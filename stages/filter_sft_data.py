"""Stage filter_sft_data: keep the SFT traces whose final answer is correct."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet, write_text
from a5core.config import EvalConfig, load_section
from a5core.data.adapters import SFT_SCHEMA
from a5core.grader import GraderPool
from a5core.reports import filter_report
from a5core.sft_data import filter_traces


def main() -> None:
    a = stage.args("sft", "out", "metrics", "report")
    cfg = load_section(EvalConfig, "validation", a.params)
    rows = stage.rows(a.sft, SFT_SCHEMA.names)
    with GraderPool(cfg.reward_fn, cfg.grader_workers, cfg.grader_timeout_s) as pool:
        kept, rejected, stats = filter_traces(rows, pool)
    write_parquet(kept, a.out, provenance("filter_sft_data", cfg, {"sft": a.sft}), SFT_SCHEMA)
    write_json(stats, a.metrics)
    write_text(filter_report(rows, kept, rejected, stats), a.report)
    print(f"kept {stats['kept']}/{stats['total']} traces")


if __name__ == "__main__":
    main()
