"""Put back into DVC's cache the outputs whose cache objects were lost while the workspace still holds them, so that
`dvc repro` does not retrain them.

    python -m tools.recache          # what it finds; each intact output stored back into the cache
    python -m tools.recache --dry    # what it finds, nothing written

When an object of DVC's cache is deleted (a cleanup, `dvc gc` run from another branch, a cache moved by hand) while the
workspace still holds the output, `dvc status` says `not in cache` and `dvc repro` runs the stage again: DVC deletes the
output first, so a finished training run would train from scratch. An output is put back only when the workspace holds
it with the hash dvc.lock records (the bytes the stage made); DVC stores it under the hash of the bytes it reads, and
dvc.lock is not written, so a file that changes meanwhile can never be recorded in the lost one's place. A lost output
that is missing or modified in the workspace too is listed, for `dvc repro` (or `dvc pull`, from a remote).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Lost:
    """A stage's outputs missing from the cache, and `why` the workspace cannot give them back ('' when it can)."""

    stage: str
    outs: tuple[str, ...]
    why: str = ""

    @property
    def intact(self) -> bool:
        return not self.why


def _why_not(outs) -> str:
    """Why the workspace cannot give back `outs` (DVC outputs not in the cache), or '' when it can."""
    for out in outs:
        status = out.workspace_status()  # {} when the workspace file or folder has the hash dvc.lock records
        if status:
            return f"{out} is {next(iter(status.values()))} in the workspace"
    return ""


def recache(root: str = ".", dry: bool = False) -> list[Lost]:
    """Every stage with cached outputs whose cache objects are missing; unless `dry`, the intact ones are stored into
    the cache from the workspace (DVC's own `Output.commit`, without relinking), all under the repository's lock."""
    from dvc.repo import Repo, lock_repo

    found = []
    with Repo(root) as repo, lock_repo(repo):
        for stage in repo.index.stages:
            lost = [out for out in stage.outs if out.use_cache and out.hash_info and out.changed_cache()]
            if not lost:
                continue
            why = _why_not(lost)
            if not why and not dry:
                for out in lost:
                    out.commit(relink=False)
                why = next((f"{o} changed while it was stored" for o in lost if o.changed_cache()), "")
            found.append(Lost(stage.addressing, tuple(str(o) for o in lost), why))
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
