"""The profiles as DVC composes them. A file in conf/profile/ is not a params file by itself: a derived profile holds
only its differences from its base (Hydra's defaults list), so tests read a profile's composition, never its file.

- `composed_text(profile)`: the params.yaml `dvc exp run -S profile=<profile>` writes (Hydra's compose API, called as
  DVC calls it: conf/config.yaml, the repository root as plugins path), without tools.profile's header line.
- `composed(profile)`: the same as a dict; `write_composed(profile, folder)`: the same in `<folder>/<profile>.yaml`.

May import: the standard library, DVC (its Hydra helper) and PyYAML. Test modules import this; it imports no test
module.
"""

import functools
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.stem for p in (ROOT / "conf" / "profile").glob("*.yaml"))


@functools.cache
def composed_text(profile: str) -> str:
    from dvc.utils.hydra import compose_and_dump

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        compose_and_dump(out, str(ROOT / "conf"), None, "config", str(ROOT), [f"profile={profile}"])
        return out.read_text()


def composed(profile: str) -> dict:
    return yaml.safe_load(composed_text(profile))


def write_composed(profile: str, folder: Path) -> Path:
    path = Path(folder) / f"{profile}.yaml"
    path.write_text(composed_text(profile))
    return path
