"""Put back into DVC's cache the outputs whose cache objects were lost while the workspace still holds them, so that
`dvc repro` does not retrain them.

    python -m tools.recache          # what it finds, then `dvc commit -f` of each such stage
    python -m tools.recache --dry    # what it finds, nothing written

When an object of DVC's cache is deleted (a cleanup, `dvc gc` run from another branch, a cache moved by hand) while the
workspace still holds the output, `dvc status` says `not in cache` and `dvc repro` runs the stage again: DVC deletes the
output first, so a finished training run would train from scratch. A stage is put back only when its command, its
dependencies and every output but the lost ones are as dvc.lock records them, and each lost output is in the workspace
with the hash dvc.lock records (that is: the same bytes the stage made). A lost output that is missing or modified in
the workspace too cannot be put back: its stage is listed, and `dvc repro` (or `dvc pull`, from a remote) is the way.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Lost:
    """A stage with outputs missing from the cache: `intact` when the workspace can give them back, else `why` not."""

    stage: str
    outs: tuple[str, ...]
    intact: bool
    why: str = ""


def _why_not(stage) -> str:
    """Why `stage`, some of its outputs not in the cache, cannot be committed as it stands, or '' when it can."""
    if stage.changed_stage():
        return "its command or definition changed"
    if stage.changed_deps():
        return "a dependency changed"
    for out in stage.outs:
        status = out.workspace_status()
        if status:
            return f"{out} is {next(iter(status.values()))} in the workspace"
    return ""


def lost_outputs(repo) -> list[Lost]:
    """Every stage of `repo` (a `dvc.repo.Repo`, its lock held) with cached outputs whose cache objects are missing."""
    found = []
    for stage in repo.index.stages:
        lost = [out for out in stage.outs if out.use_cache and out.hash_info and out.changed_cache()]
        if lost:
            why = _why_not(stage)
            found.append(Lost(stage.addressing, tuple(str(o) for o in lost), not why, why))
    return found


def recache(root: str = ".", dry: bool = False) -> list[Lost]:
    """Find the stages whose lost outputs the workspace holds intact and, unless `dry`, commit them back (`dvc commit
    -f <stage>`: the workspace files are hashed, checked against dvc.lock again, and copied into the cache)."""
    from dvc.repo import Repo

    with Repo(root) as repo:
        with repo.lock:
            found = lost_outputs(repo)
        for item in found:
            if item.intact and not dry:
                repo.commit(item.stage, force=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="list what is lost; write nothing")
    args = parser.parse_args(argv)
    found = recache(dry=args.dry)
    for item in found:
        verb = ("can be put back" if args.dry else "put back from the workspace") if item.intact else "not put back"
        print(f"{item.stage}: {', '.join(item.outs)} {verb}" + ("" if item.intact else f" ({item.why}; dvc repro)"))
    if not found:
        print("every cached output is in the cache: nothing to do")
    return 0 if all(item.intact for item in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
