"""Push every stage this machine ran to a DVC remote, so other machines' `dvc repro --pull` skips it (README "A grid
over machines").

- `python -m tools.push_runs [-r REMOTE]`: first hashes every local cache object the remote lacks and refuses to push
  if one's md5 differs from its name (reports/inplace_outputs.md), then `dvc push --run-cache`, then every output of
  every run-cache entry in the local cache (models, logs, and the `cache: false` metrics and live plots).
- `python -m tools.push_runs --repair`: hashes every object of the local cache and deletes those whose md5 differs
  from their name; the next `dvc repro` reruns (or restores from the run cache) the stages that made them.
- Another machine's `dvc repro --pull` pulls the run cache, restores each stage run with the same inputs, params and
  command ("is cached - skipping run", downloading its outputs) and runs the rest.

Why not `dvc push --run-cache` alone: it uploads the run-cache entries and the outputs that the workspace's dvc.lock
names, never an entry's `cache: false` outputs (DVC 3.67; they are saved to the local cache since treeverse/dvc#3778),
so another machine finds the entry, cannot check out its metrics, and runs the stage again.

Why hash before pushing: DVC trusts a read-only (0444) cache object without hashing it (dvc_data's
`LocalHashFileDB.check`), so an object written through a hard link by an earlier `cache.type` keeps its name with
other bytes, and `dvc push` would send it. Only the objects the remote lacks are hashed: the bytes the push reads.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

from dvc.exceptions import DvcException
from dvc.repo import Repo

REPAIR = "python -m tools.push_runs --repair && dvc repro"
OBJECT = re.compile(r"[0-9a-f]{30}(\.dir)?")  # the file name of an object under .dvc/cache/files/md5/<2 hex>/


def run_cache_outputs(repo: Repo) -> tuple[set, int]:
    """(the objects of every output recorded by the run-cache entries in the local cache, entries skipped because
    their outputs left the cache)."""
    cache, found, skipped = repo.stage_cache, set(), 0
    for entry in sorted(Path(cache.cache_dir).glob("*/*/*")):
        # a stage rebuilt from an entry treats every output as cached (the entry does not record `cache: false`)
        stage = cache._create_stage(cache._load_cache(entry.parent.name, entry.name))
        try:
            for objects in stage.get_used_objs().values():  # a folder's tree and each of its files
                found |= objects
        except (DvcException, OSError):  # a folder's tree was removed (`dvc gc`): nothing of it to push
            skipped += 1
    return found, skipped


def md5_of(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def corrupt_objects(paths) -> list[Path]:
    """The cache objects among `paths` whose md5 differs from their name (a `.dir` listing's name is the md5 of its
    bytes too); missing ones are skipped."""
    bad = []
    for path in map(Path, paths):
        if path.is_file() and md5_of(path) != path.parent.name + path.name.removesuffix(".dir"):
            bad.append(path)
    return bad


def cache_objects(repo: Repo) -> list[Path]:
    """Every object file of the local cache (`.dvc/cache/files/md5`), DVC's temporary files left out."""
    root = Path(repo.cache.local.path)
    return [p for p in sorted(root.glob("??/*")) if OBJECT.fullmatch(p.name) and p.is_file()]


def unpushed_objects(repo: Repo, outputs: set, remote: str | None) -> list[Path]:
    """The local cache files of `outputs` and of the workspace's outputs that the remote lacks: what a push reads."""
    objects = set(outputs)
    for used in repo.used_objs(push=True, skip_failed=True).values():
        objects |= used
    new = repo.cloud.status(objects, remote=remote).new
    return [Path(repo.cache.local.oid_to_path(h.value)) for h in sorted(new, key=str) if h.name == "md5"]


def refuse(bad: list[Path], root: Path) -> None:
    names = ", ".join(str(p.relative_to(root)) for p in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    sys.exit(
        f"push_runs: {len(bad)} cache object(s) hold bytes whose md5 differs from their name ({names}); nothing was "
        f"pushed. Repair: `{REPAIR}`"
    )


def repair(repo: Repo) -> None:
    root = Path(repo.root_dir)
    bad = corrupt_objects(cache_objects(repo))
    for path in bad:
        path.unlink()
        print(f"push_runs: deleted {path.relative_to(root)} (its md5 differs from its name)")
    print(
        f"push_runs: {len(bad)} corrupt cache object(s) deleted"
        + ("; `dvc repro` now reruns or restores the stages that wrote them" if bad else "")
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.push_runs", description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--remote", default=None, help="the DVC remote (default: core.remote)")
    parser.add_argument("--repair", action="store_true", help="delete local cache objects whose md5 is not their name")
    args = parser.parse_args(argv)
    if args.repair:
        with Repo() as repo:
            return repair(repo)
    with Repo() as repo:
        outputs, skipped = run_cache_outputs(repo)
        try:
            bad = corrupt_objects(unpushed_objects(repo, outputs, args.remote))
        except DvcException as exc:  # no remote configured, an unreachable remote: what `dvc push` would say
            sys.exit(f"push_runs: {exc}")
        if bad:
            refuse(bad, Path(repo.root_dir))
    cmd = [sys.executable, "-m", "dvc", "push", "--run-cache", *(["-r", args.remote] if args.remote else [])]
    if code := subprocess.run(cmd).returncode:
        sys.exit(f"push_runs: `{' '.join(cmd[2:])}` failed (exit {code})")
    with Repo() as repo:
        result = repo.cloud.push(outputs, remote=args.remote)
    print(f"push_runs: {len(outputs)} objects of the run cache's outputs, {len(result.transferred)} uploaded", end="")
    gone = f"; not in this machine's cache (`dvc gc`?): {len(result.failed)} objects, {skipped} entries' folders"
    print(gone if result.failed or skipped else "")


if __name__ == "__main__":
    main()
