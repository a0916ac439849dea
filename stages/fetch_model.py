"""Stage fetch_model: resolve model.source into a local model folder."""

from a5core.base.artifacts import provenance, write_json
from a5core.base.run_record import write_run_record
from a5core.config.sections import ModelConfig, load_section
from a5core.model.loading import fetch_model
from a5core.stage import entry


def main() -> None:
    args = entry.args("out", "record")
    cfg = load_section(ModelConfig, "model", args.params)
    record = fetch_model(cfg, args.out)
    write_json({**provenance("fetch_model", cfg), "resolved": record}, f"{args.out}/provenance.json")
    write_run_record(args.record, "fetch_model")
    print(f"model ready in {args.out}: {record}")


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
