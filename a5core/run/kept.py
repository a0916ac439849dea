"""A finished training stage's outputs, kept in its scratch folder until DVC's cache holds them.

DVC commits a stage's outputs after its command exits; if that commit does not happen (DVC killed, its cache's disk
full, the job's time up), DVC deletes the outputs before it runs the stage again, and the resume state was already
gone: the stage trained again from step 0. So a training stage ends with `keep`: hard links to every file it wrote
(no extra disk until DVC commits them: DVC then copies them into its cache and replaces the workspace's files by
copies, so the kept links hold the third copy; a copy where scratch/ is on another filesystem) and their md5s, in
`<scratch>/finished/`, in place of its resume state. Run again with the same fingerprint (params and inputs), it
finds them (`put_back`), links them back and exits at once; DVC then commits them. Every stage's start (`prune`,
from a5core.stage.entry) deletes the kept folders whose model files DVC's cache holds (by md5): that stage's commit
happened. So the last stage's outputs take disk twice over until another stage starts; `python -m a5core.run.kept`
prunes now. No torch: the plain files, and DVC's API for where its cache is.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from a5core.base.typed import check_pinned_params

KEPT = "finished"
MANIFEST = "manifest.json"


def _files(out: Path) -> list[Path]:
    """The files of an output (a file or a folder), git's .gitignore files (DVC's, in git) left out."""
    if out.is_file():
        return [out]
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name != ".gitignore") if out.is_dir() else []


def _md5(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def _link(src: Path, dst: Path) -> None:
    """`dst` as a hard link to `src`, or a copy where they are on different filesystems (or links are refused)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(src, dst)


def keep(folder: str | Path, fp: str, outputs: list[str]) -> None:
    """After a stage wrote all of `outputs` (files and folders; the first, its model folder, one DVC caches):
    everything else in `folder` (the resume state) is replaced by `folder/finished/`, the outputs' files linked there
    by number, with a manifest of their paths, md5s and the run's fingerprint `fp`. Written to finished.tmp/ and
    renamed: a kill leaves the state or the kept files. Refused (`ParamsChanged`, the state left as it is) when the
    params file holds other values than the stage ran with: a rerun at its params resumes."""
    check_pinned_params()
    folder = Path(folder)
    tmp = folder / f"{KEPT}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files = [f for out in outputs for f in _files(Path(out))]
    for i, f in enumerate(files):
        _link(f, tmp / str(i))
    entries = [{"path": str(f), "md5": _md5(f)} for f in files]
    proof = [e["md5"] for e in entries[: len(_files(Path(outputs[0])))]] if outputs else []
    manifest = {"fingerprint": fp, "files": entries, "cached_when_committed": proof}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    for entry in folder.iterdir():
        if entry.name != tmp.name:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    tmp.rename(folder / KEPT)


def has(folder: str | Path, fp: str) -> bool:
    """Whether `folder` keeps the outputs of a run with fingerprint `fp`, every file with the md5 it was kept with
    (one changed since, written in place through the workspace's link, say, makes the kept folder go: the stage
    trains again rather than put back other bytes)."""
    kept = Path(folder) / KEPT
    try:
        manifest = json.loads((kept / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("fingerprint") != fp:
        return False
    try:
        intact = all(_md5(kept / str(i)) == e["md5"] for i, e in enumerate(manifest["files"]))
    except (OSError, KeyError):
        intact = False
    if not intact:
        print(f"WARNING: {kept} holds other bytes than it kept; deleted (the stage trains again)", file=sys.stderr)
        shutil.rmtree(kept, ignore_errors=True)
    return intact


def put_back(folder: str | Path, fp: str) -> int:
    """When `folder` keeps the outputs of a run with fingerprint `fp`: link every file back to its path (replacing
    what is there) and return how many; 0 when it keeps none, or another run's (deleted then)."""
    kept = Path(folder) / KEPT
    try:
        manifest = json.loads((kept / MANIFEST).read_text())
    except (OSError, ValueError):
        return 0
    if manifest.get("fingerprint") != fp:
        shutil.rmtree(kept, ignore_errors=True)
        return 0
    for i, entry in enumerate(manifest["files"]):
        dst = Path(entry["path"])
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()
        _link(kept / str(i), dst)
    return len(manifest["files"])


def prune(scratch: str | Path = "scratch") -> list[Path]:
    """Delete the kept folders under `scratch` whose model files DVC's cache holds (the cache of the DVC repository
    in the working directory; none outside one): DVC committed that stage (its other outputs with them, some not in
    the cache: metrics are `cache: false`). Then the folders left empty; returns those deleted."""
    manifests = sorted(Path(scratch).glob(f"**/{KEPT}/{MANIFEST}"))
    if not manifests:
        return []
    cache = _dvc_cache()
    if cache is None:
        return []
    pruned = []
    for manifest in manifests:
        try:
            proof = json.loads(manifest.read_text()).get("cached_when_committed")
        except (OSError, ValueError):
            continue
        if not proof or all(os.path.exists(cache(md5)) for md5 in proof):  # none: a manifest of an older a5
            shutil.rmtree(manifest.parent, ignore_errors=True)
            _remove_empty_parents(manifest.parent, Path(scratch))
            pruned.append(manifest.parent)
    return pruned


def main() -> None:
    """`python -m a5core.run.kept`: prune now (every stage's start does)."""
    for folder in prune():
        print(f"deleted {folder}")


def _dvc_cache():
    """md5 -> the path DVC's local cache keeps that content at; None outside a DVC repository, or when DVC cannot
    say (pruning never stops a stage: the kept folders wait for the next one)."""
    from dvc.repo import Repo

    try:
        with Repo(".") as repo:
            return repo.cache.local.oid_to_path
    except Exception:  # NotDvcRepoError, a config DVC refuses, ...
        return None


def _remove_empty_parents(folder: Path, stop: Path) -> None:
    for parent in [*folder.parents]:
        if parent == stop.parent or not parent.is_relative_to(stop):
            return
        try:
            parent.rmdir()
        except OSError:
            return


if __name__ == "__main__":
    main()
