"""Select a profile, or put back the params the workspace's results were made with.

    python -m tools.profile full                   # conf/config.yaml selects full; params.yaml = full
    python -m tools.profile default grpo.lr=3e-6   # ... with overrides, as `dvc exp run -S` takes them
    python -m tools.profile --restore              # params.yaml = the params dvc.lock's results were made with
    python -m tools.profile cpu-study --out p.yaml # the composition in p.yaml; params.yaml and conf/ untouched

`dvc exp run` composes params.yaml from conf/ on every run (DVC's Hydra integration), starting from the profile
selected in conf/config.yaml, plus its -S overrides (`dvc exp run -S profile=full` picks another for one experiment);
so edits go in conf/profile/*.yaml or -S. `dvc repro` reads params.yaml as it is. The committed params.yaml is the
composition of the committed conf/ (a test checks it). Every field's default lives in its dataclass only:
conf/config.yaml composes them first (`a5_defaults`, hydra_plugins/a5_params.py), so default and full hold what differs
from them, and a derived profile (smoke, cpu-study and quick from default, full-mini from full) only its differences
from its base: its Hydra defaults list composes the base first.

A composition is checked before it is written (every section's keys, types and ranges; one line per problem, with
the closest known key for a typo), so a refused one leaves params.yaml as it was. A refused `dvc exp run` is
different: DVC writes params.yaml before any stage runs, so its values stay there and the next `dvc repro` stops at
`check_params` too; `--restore` writes back the params the workspace's results came from: dvc.lock's `check_params`
entry, with each other stage's own recorded values over it (so a run stopped by Ctrl-C after `check_params` is
undone too; a run that finished some stages and not others is refused, naming them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted(p.stem for p in (ROOT / "conf" / "profile").glob("*.yaml"))
HEADER = "# Composed from conf/ (profile {profile}) by DVC's Hydra integration; edit conf/profile/*.yaml, or use -S.\n"
RESTORED = "# Restored from dvc.lock by `python -m tools.profile --restore`: the params its results were made with.\n"


class ProfileError(RuntimeError):
    """A composition or restore that cannot be done; its message is what the user reads."""


def select(profile: str) -> None:
    """Make `profile` the default of conf/config.yaml's defaults list."""
    config = ROOT / "conf" / "config.yaml"
    lines = config.read_text().splitlines(keepends=True)
    lines = [f"  - profile: {profile}\n" if line.strip().startswith("- profile:") else line for line in lines]
    config.write_text("".join(lines))


def _checked(params: dict, what: str) -> None:
    from a5core.checks.params import section_problems

    found = section_problems(params, what)
    if found:
        raise ProfileError(f"{what}: {len(found)} problem(s); params.yaml is unchanged:\n  - " + "\n  - ".join(found))


def compose(profile: str, overrides: list[str], out: str | Path) -> None:
    """Compose `profile` with Hydra overrides, check it, then write it to `out` (untouched when refused)."""
    from dvc.utils.hydra import compose_and_dump
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from a5core.base.typed import load_yaml

    if profile not in PROFILES:
        raise ProfileError(f"unknown profile {profile!r}; profiles: {', '.join(PROFILES)}")
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / "params.yaml"
        try:  # ROOT is the plugins path, as for DVC: hydra_plugins/a5_params.py names the closest key of a typo
            compose_and_dump(draft, str(ROOT / "conf"), None, "config", str(ROOT), [f"profile={profile}", *overrides])
        except (HydraException, OmegaConfBaseException) as err:
            raise ProfileError(str(err).splitlines()[0]) from None
        text = draft.read_text()
    _checked(load_yaml(text), f"profile {profile} {' '.join(overrides)}".strip())
    Path(out).write_text(HEADER.format(profile=profile) + text)


def locked_params(lock: str | Path) -> dict:
    """The params the workspace's results were made with, as dvc.lock records them: `check_params`' whole params.yaml,
    with every other stage's own recorded values over it (a run stopped after `check_params`, by Ctrl-C or an error,
    leaves its new params there while the stages it did not reach keep the ones their outputs were made with). Two
    stages recording two values of one key (a stopped run finished one of them) have no one params file to restore:
    ProfileError names them."""
    from a5core.checks.forecast import read_lock

    lock = Path(lock)
    if not lock.is_file():
        raise ProfileError(f"{lock}: no such file: nothing has run here yet, so there is nothing to restore")
    stages = read_lock(lock).get("stages") or {}
    params = ((stages.get("check_params") or {}).get("params") or {}).get("params.yaml")
    if not params:
        raise ProfileError(f"{lock}: no check_params entry with params.yaml's values: run `dvc repro check_params`")
    made: dict[str, tuple[object, str]] = {}  # a key's dotted path -> (the value a stage's outputs were made with, it)
    for name, entry in stages.items():
        recorded = ((entry.get("params") or {}).get("params.yaml") or {}) if name != "check_params" else {}
        for key, value in (leaf for k, v in recorded.items() for leaf in _leaves(k, v)):
            first = made.setdefault(key, (value, name))
            if first[0] != value:
                raise ProfileError(
                    f"{lock}: the workspace's results were made with two values of {key}: {first[1]} with "
                    f"{first[0]!r}, {name} with {value!r} (a stopped run finished one of them); run `dvc repro` to "
                    "bring them together, or `git restore params.yaml dvc.lock results reports` for the committed ones"
                )
    for key, (value, _) in made.items():
        *path, last = key.split(".")
        node = params
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return params


def _leaves(key: str, value):
    """(dotted key, value) of each leaf under `key` (an empty mapping is a leaf: a run entry with no overrides)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(f"{key}.{k}", v)
    else:
        yield key, value


def restore(lock: str | Path, out: str | Path) -> dict:
    """Write dvc.lock's params to `out`, sections in the order of the current params.yaml (else the profile's)."""
    from omegaconf import OmegaConf

    from a5core.base.typed import read_params
    from a5core.checks.params import RUN_SECTIONS, SECTIONS

    params = locked_params(lock)
    _checked(params, f"{lock}'s params")
    try:
        order = list(read_params(out))
    except Exception:  # a params.yaml that cannot be read is what --restore repairs
        order = []
    order += [k for k in [*SECTIONS, *RUN_SECTIONS] if k not in order]
    ordered = {k: params[k] for k in sorted(params, key=lambda k: order.index(k) if k in order else len(order))}
    Path(out).write_text(RESTORED + OmegaConf.to_yaml(OmegaConf.create(ordered)))
    return ordered


def main() -> None:
    from a5core.base.typed import load_yaml

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", nargs="?", choices=PROFILES, help="conf/profile/<profile>.yaml")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for dvc exp run -S (grpo.lr=3e-6)")
    ap.add_argument("--restore", action="store_true", help="params.yaml <- the params of the results (dvc.lock)")
    ap.add_argument("--out", type=Path, help="write the composition there instead (params.yaml, conf/ untouched)")
    a = ap.parse_args()
    if a.restore == bool(a.profile) or (a.restore and a.out):
        ap.error("give a profile, or --restore (without --out)")
    try:
        if a.restore:
            restore(ROOT / "dvc.lock", ROOT / "params.yaml")
            print("params.yaml <- dvc.lock's params, those the workspace's results were made with")
            return
        compose(a.profile, a.overrides, a.out or ROOT / "params.yaml")
    except ProfileError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if a.out:
        print(f"{a.out} <- profile {a.profile} {' '.join(a.overrides)}".rstrip())
        return
    select(a.profile)
    print(f"params.yaml <- profile {a.profile} {' '.join(a.overrides)}; conf/config.yaml now selects {a.profile}")
    try:
        stale = locked_params(ROOT / "dvc.lock") != load_yaml((ROOT / "params.yaml").read_text())
    except ProfileError:
        stale = False
    if stale:
        print("results/ were made with other params (dvc.lock): `dvc repro` reruns what changed; --restore undoes this")


if __name__ == "__main__":
    main()
