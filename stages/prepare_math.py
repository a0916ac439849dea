"""Stage prepare_math: train / validation / SFT Parquet files from the data params."""
from a5core import stage
from a5core.artifacts import provenance, write_json, write_parquet
from a5core.config import DataConfig, load_section
from a5core.data.adapters import PROBLEM_SCHEMA, SFT_SCHEMA
from a5core.data.prepare import prepare


def main() -> None:
    a = stage.args("train", "validation", "sft", "report")
    cfg = load_section(DataConfig, "data", a.params)
    splits, report = prepare(cfg)
    prov = provenance("prepare_math", cfg)
    keep = lambda rows, schema: [{k: r.get(k, "") for k in schema.names} for r in rows]  # noqa: E731
    write_parquet(keep(splits["train"], PROBLEM_SCHEMA), a.train, prov, PROBLEM_SCHEMA)
    write_parquet(keep(splits["validation"], PROBLEM_SCHEMA), a.validation, prov, PROBLEM_SCHEMA)
    write_parquet(keep(splits["sft"], SFT_SCHEMA), a.sft, prov, SFT_SCHEMA)
    write_json(report, a.report)
    print(report)


if __name__ == "__main__":
    main()
