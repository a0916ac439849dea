"""Select a profile: make it the one `dvc exp run` composes, and write params.yaml from it for `dvc repro`.

    python -m tools.profile full                      # conf/config.yaml selects full; params.yaml = full
    python -m tools.profile default grpo.learning_rate=3e-6

`dvc exp run` composes params.yaml from conf/ on every run (DVC's Hydra integration), starting from the profile
selected in conf/config.yaml, plus its -S overrides (`dvc exp run -S profile=full` picks another for one experiment);
so edits go in conf/profile/*.yaml or -S. `dvc repro` reads params.yaml as it is. The committed params.yaml is the
composition of the committed conf/ (a test checks it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted(p.stem for p in (ROOT / "conf" / "profile").glob("*.yaml"))
HEADER = "# Composed from conf/ (profile {profile}) by DVC's Hydra integration; edit conf/profile/*.yaml, or use -S.\n"


def select(profile: str) -> None:
    """Make `profile` the default of conf/config.yaml's defaults list."""
    config = ROOT / "conf" / "config.yaml"
    lines = config.read_text().splitlines(keepends=True)
    lines = [f"  - profile: {profile}\n" if line.strip().startswith("- profile:") else line for line in lines]
    config.write_text("".join(lines))


def compose(profile: str, overrides: list[str], out: str | Path) -> None:
    from dvc.utils.hydra import compose_and_dump

    if profile not in PROFILES:
        raise SystemExit(f"unknown profile {profile!r}; profiles: {PROFILES}")
    compose_and_dump(out, str(ROOT / "conf"), None, "config", "", [f"profile={profile}", *overrides])
    text = Path(out).read_text()
    Path(out).write_text(HEADER.format(profile=profile) + text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", choices=PROFILES, help="conf/profile/<profile>.yaml")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for dvc exp run -S (grpo.learning_rate=3e-6)")
    a = ap.parse_args()
    compose(a.profile, a.overrides, ROOT / "params.yaml")
    select(a.profile)
    print(f"params.yaml <- profile {a.profile} {' '.join(a.overrides)}; conf/config.yaml now selects {a.profile}")


if __name__ == "__main__":
    main()
