"""What the memory and disk plans are tested on: Qwen2.5-Math-1.5B's shape (`QWEN`, a5core/run/plan.py's KNOWN) and
the full profile's params file with some fields changed (`full_params(folder, section__field=value, ...)`, written
to `<folder>/params.yaml`).

May import: the standard library, a5core and PyYAML. Test modules import this; it imports no test module.
"""

from pathlib import Path

import yaml

from a5core.run import plan

ROOT = Path(__file__).resolve().parents[2]
QWEN = plan.Arch.of(plan.KNOWN["hf:Qwen/Qwen2.5-Math-1.5B"])


def full_params(folder: Path, **edits) -> Path:
    """The full profile as composed (tests/fixtures/profiles/full.yaml, a whole params file) with
    `section__field=value` edits."""
    params = yaml.safe_load((ROOT / "tests" / "fixtures" / "profiles" / "full.yaml").read_text())
    for key, value in edits.items():
        section, field = key.split("__")
        params[section][field] = value
    p = Path(folder) / "params.yaml"
    p.write_text(yaml.safe_dump(params))
    return p
