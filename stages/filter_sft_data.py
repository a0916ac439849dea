"""Stage filter_sft_data: keep the SFT traces whose final answer is correct by `sft.reward_fn` (default: r1_zero's)."""

from a5core.base.artifacts import provenance, write_json, write_parquet, write_text
from a5core.base.run_record import write_run_record
from a5core.config.sections import EvalConfig, read_params, section_of
from a5core.data.adapters import SFT_SCHEMA
from a5core.data.sft_traces import filter_traces
from a5core.grader import GraderPool
from a5core.rl.sft import SFTConfig
from a5core.run.stage_reports import filter_report
from a5core.stage import entry


def main() -> None:
    args = entry.args("sft", "out", "metrics", "report", "record")
    raw = read_params(args.params)  # read once: its sections typed from it
    reward = section_of(raw, SFTConfig, "sft", args.params).train_reward
    cfg = section_of(raw, EvalConfig, "validation", args.params)  # the grader's workers and time limit
    rows = entry.rows(args.sft, SFT_SCHEMA.names)
    with GraderPool(reward, cfg.grader_workers, cfg.grader_timeout_s) as pool:
        kept, rejected, stats = filter_traces(rows, pool)
    params = {"train_reward": reward, "grader_timeout_s": cfg.grader_timeout_s}
    write_parquet(kept, args.out, provenance("filter_sft_data", params, {"sft": args.sft}), SFT_SCHEMA)
    write_json({k: v for k, v in stats.items() if k != "by_group"}, args.metrics)
    write_text(filter_report(rows, kept, rejected, stats), args.report)
    write_run_record(args.record, "filter_sft_data")
    print(f"kept {stats['kept']}/{stats['total']} traces")


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
