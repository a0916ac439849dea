"""Stage prepare_math: train / validation / SFT Parquet files from the data params."""

from a5core.base.artifacts import provenance, write_json, write_parquet
from a5core.base.run_record import write_run_record
from a5core.config.sections import DataConfig, load_section
from a5core.data.adapters import PROBLEM_SCHEMA, SFT_SCHEMA
from a5core.data.prepare import prepare
from a5core.stage import entry


def columns(rows: list[dict], schema) -> list[dict]:
    return [{k: r.get(k, "") for k in schema.names} for r in rows]


def main() -> None:
    args = entry.args("train", "validation", "sft", "report", "record")
    cfg = load_section(DataConfig, "data", args.params)
    splits, report = prepare(cfg)
    prov = provenance("prepare_math", cfg)
    write_parquet(columns(splits["train"], PROBLEM_SCHEMA), args.train, prov, PROBLEM_SCHEMA)
    write_parquet(columns(splits["validation"], PROBLEM_SCHEMA), args.validation, prov, PROBLEM_SCHEMA)
    write_parquet(columns(splits["sft"], SFT_SCHEMA), args.sft, prov, SFT_SCHEMA)
    write_json(report, args.report)
    write_run_record(args.record, "prepare_math")
    print(report)


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
