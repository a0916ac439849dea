"""Push every stage this machine ran to a DVC remote, so other machines' `dvc repro --pull` skips it (README "A grid
over machines").

- `python -m tools.push_runs [-r REMOTE]`: `dvc push --run-cache`, then every output of every run-cache entry in the
  local cache (models, logs, and the `cache: false` metrics and live plots).
- Another machine's `dvc repro --pull` pulls the run cache, restores each stage run with the same inputs, params and
  command ("is cached - skipping run", downloading its outputs) and runs the rest.

Why not `dvc push --run-cache` alone: it uploads the run-cache entries and the outputs that the workspace's dvc.lock
names, never an entry's `cache: false` outputs (DVC 3.67; they are saved to the local cache since treeverse/dvc#3778),
so another machine finds the entry, cannot check out its metrics, and runs the stage again.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from dvc.exceptions import DvcException
from dvc.repo import Repo


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.push_runs", description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--remote", default=None, help="the DVC remote (default: core.remote)")
    args = parser.parse_args(argv)
    cmd = [sys.executable, "-m", "dvc", "push", "--run-cache", *(["-r", args.remote] if args.remote else [])]
    if code := subprocess.run(cmd).returncode:
        sys.exit(f"push_runs: `{' '.join(cmd[2:])}` failed (exit {code})")
    with Repo() as repo:
        outputs, skipped = run_cache_outputs(repo)
        result = repo.cloud.push(outputs, remote=args.remote)
    print(f"push_runs: {len(outputs)} objects of the run cache's outputs, {len(result.transferred)} uploaded", end="")
    gone = f"; not in this machine's cache (`dvc gc`?): {len(result.failed)} objects, {skipped} entries' folders"
    print(gone if result.failed or skipped else "")


if __name__ == "__main__":
    main()
