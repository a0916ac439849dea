"""Stage fetch_model: resolve model.source into a local model folder."""

from a5core import stage
from a5core.artifacts import provenance, write_json
from a5core.config import ModelConfig, load_section
from a5core.model_io import fetch_model
from a5core.runinfo import write_run_record


def main() -> None:
    args = stage.args("out", "record")
    cfg = load_section(ModelConfig, "model", args.params)
    record = fetch_model(cfg, args.out)
    write_json({**provenance("fetch_model", cfg), "resolved": record}, f"{args.out}/provenance.json")
    write_run_record(args.record, "fetch_model")
    print(f"model ready in {args.out}: {record}")


if __name__ == "__main__":
    stage.run(main)  # the project's own errors end in one line
