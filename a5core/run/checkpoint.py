"""Resumable training state in a scratch folder outside DVC's cache.

The folder holds `fingerprint.txt` (a hash of the run's params and inputs) and `state/`, replaced atomically:
written to `state.tmp/`, then renamed. A run whose fingerprint differs starts fresh (the old state is deleted). A
SIGKILL at any moment leaves either the previous complete state or the new one.

- `state/state.pt`: scheduler, RNG states, step, history so far; with one process or ddp also the whole model and
  optimizer state (rank 0 writes it).
- `state/dcp/` under fsdp2 instead: torch.distributed.checkpoint's files, each rank's shards written by that rank
  (a5core.model.distributed.save_sharded), resharded on load onto any layout and world size. `state.pt` lists their
  sizes, so a shard file cut short by a full disk makes the state unreadable, as a cut `state.pt` does. One whose
  sizes check out but that fails to load is moved aside too, and the stage stops (`UnreadableShards`: the weights may
  be half loaded); run again, it starts from scratch.

Preemption (`take_preemption_signals`, called by every training stage): SIGUSR1 (what the sbatch templates ask SLURM
to send before the time limit) or SIGTERM (scancel, a node drained, torchrun stopping its ranks) makes the stage
write a checkpoint at the next step boundary, whatever `checkpoint_every` says, and stop there (`Preempted`: exit
`REQUEUE`). The ranks agree on the step (`due` asks every rank), so each writes the same one.

States are loaded with `torch.load(weights_only=True)`: only tensors and plain containers, so a crafted file in
`scratch/` cannot run code. A state that fails to load (truncated by a full disk, say) is moved aside with a
warning and the run starts from scratch instead of failing on every rerun.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from a5core.base.errors import ProjectError
from a5core.model import distributed


class UnreadableShards(ProjectError):
    """A distributed checkpoint that failed to load after its sizes checked out; it was moved aside."""

    hint = "run the stage again: it starts from scratch"


REQUEUE = 75  # a preempted stage's exit status (sysexits' EX_TEMPFAIL: try again), which the sbatch templates requeue
PREEMPTING = (signal.SIGUSR1, signal.SIGTERM)
_asked: list[str] = []  # the preempting signals this process received, by name, in order


class Preempted(BaseException):
    """A preempting signal came; the stage checkpointed at step `step` and stops (a BaseException: no `except
    Exception` on the way up may swallow it). `args[0]`: what to say (the stage adds its name and step count)."""

    def __init__(self, text: str, step: int):
        super().__init__(text)
        self.step = step


def take_preemption_signals() -> None:
    """From now on SIGUSR1 and SIGTERM only ask this process to checkpoint and stop at its next step boundary (in the
    main thread; elsewhere, as in an in-process test's worker thread, nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        for sig in PREEMPTING:
            signal.signal(sig, lambda signum, _frame: _asked.append(signal.Signals(signum).name))


def preemption_asked() -> str | None:
    """The first preempting signal's name on any rank (a collective: every rank takes the same step), else None."""
    asked = distributed.any_rank(bool(_asked))
    return (_asked[0] if _asked else "a signal on another rank") if asked else None


def fingerprint(params: Any, inputs: dict[str, str]) -> str:
    from a5core.base.artifacts import _jsonable, hash_path

    blob = json.dumps(
        {"params": params, "inputs": {k: hash_path(v) for k, v in inputs.items()}}, default=_jsonable, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def rng_state() -> dict:
    """This process's generators: torch's CPU one, its CUDA device's (cuda:<local rank>, the one its stochastic
    rounding draws from; None without CUDA) and Python's (a (version, 625 ints, gauss) tuple: plain data that
    weights_only can load)."""
    cuda = torch.cuda.get_rng_state(distributed.world().local_rank) if torch.cuda.is_available() else None
    return {"torch": torch.get_rng_state(), "cuda": cuda, "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    """Put back `rng_state()`'s generators, the CUDA one into this process's device (on another node or GPU count
    too: each rank's own device; a checkpoint written without CUDA, or before CUDA's was saved, leaves it)."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"], distributed.world().local_rank)
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def _this_ranks(rng) -> dict:
    """This rank's generators from a checkpoint's list of every rank's (rank 0's on another world size, where the
    resumed run's random draws differ from an uninterrupted one's; an older checkpoint holds one dict)."""
    if isinstance(rng, dict):
        return rng
    w = distributed.world()
    return rng[w.rank] if len(rng) == w.size else rng[0]


SHARDS = "dcp"  # fsdp2's distributed checkpoint, a folder beside state.pt
WHOLE = ("model", "optimizer")  # the whole-tensor parts of a state, which fsdp2 loads from rank 0 by broadcast


def _shard_files(folder: Path) -> dict[str, int]:
    """{file name: bytes} of a distributed checkpoint's folder ({} when there is none)."""
    return {f.name: f.stat().st_size for f in sorted(folder.iterdir())} if folder.is_dir() else {}


def _read(path: Path, sharded: bool) -> tuple[dict | None, Exception | None]:
    """(state, the error that made it unreadable). Every rank reads the file, but under fsdp2 (`sharded`) rank 0
    alone: the others get the small parts (step, RNG, history) from it, and `WHOLE` as {} -- for a whole-state file
    `distributed.load_states` then streams rank 0's tensors into their shards (why: 8 ranks each holding a 7B model's
    whole AdamW state, ~84 GB, would need ~670 GB of host memory on one node). A state whose `SHARDS` files are not
    the sizes it lists is unreadable on the ranks that see so."""
    state, err = _read_file(path, sharded)
    if state is not None and "shards" in state and _shard_files(path.parent / SHARDS) != state["shards"]:
        state, err = None, RuntimeError(f"the files of {path.parent / SHARDS} are missing or cut short")
    return state, err


def _read_file(path: Path, sharded: bool) -> tuple[dict | None, Exception | None]:
    state, err = None, None
    if distributed.is_main() or not sharded:
        try:
            state = torch.load(path, weights_only=True, map_location="cpu")
        except Exception as caught:  # any unreadable file means: do not resume from it
            err = caught
    if not sharded:
        return state, err
    rest = None if state is None else {k: v for k, v in state.items() if k not in WHOLE}
    rest = distributed.from_main(rest)
    if distributed.is_main():
        return state, err
    return (None, None) if rest is None else ({**rest, **{k: {} for k in WHOLE}}, None)


class Checkpointer:
    """Save/restore of one run's state under `folder`; `every`: steps between saves (0 = never)."""

    def __init__(self, folder: str | Path, fp: str, every: int):
        self.folder, self.every = Path(folder), every
        self.loaded: Path | None = None  # the state folder `load` read (state/, or state.old/ after a kill)
        self.preempted: str | None = None  # the preempting signal `due` saw: `save_training` then stops the run
        fp_file = self.folder / "fingerprint.txt"
        if distributed.is_main():  # one writer; the other ranks only read, after it (barrier)
            self.folder.mkdir(parents=True, exist_ok=True)
            if not fp_file.exists() or fp_file.read_text() != fp:
                for name in ("state", "state.old", "state.tmp"):  # a state of other inputs or params is never resumed
                    shutil.rmtree(self.folder / name, ignore_errors=True)
                fp_file.write_text(fp)
        distributed.barrier()

    def load(self, sharded: bool = False) -> dict | None:
        """The saved state, or None. An unreadable state is moved to `state.corrupt-<time>/` (warning). On N ranks
        the ranks agree on whether it was readable (`_read`; `sharded`: the policy is, and rank 0 alone reads), and
        rank 0 alone moves it aside."""
        for name in ("state", "state.old"):  # state.old exists only if a kill hit between the two renames
            path = self.folder / name / "state.pt"
            if not distributed.any_rank(path.exists()):
                continue
            state, err = _read(path, sharded)
            if not distributed.any_rank(err is not None):
                self.loaded = path.parent
                return state
            if distributed.is_main():
                aside = self._set_aside(path.parent)
                why = f"{type(err).__name__}: {str(err)[:200]}" if err else "unreadable on another rank"
                print(
                    f"WARNING: {path} could not be loaded ({why}); moved to {aside}. "
                    "Starting from the previous state or from scratch.",
                    file=sys.stderr,
                )
            distributed.barrier()
        return None

    def _set_aside(self, state: Path) -> Path:
        aside = self.folder / f"{state.name}.corrupt-{int(time.time())}"
        state.rename(aside)
        return aside

    def due(self, step: int) -> bool:
        """Whether to save after step `step`: every `every` steps, or now when a preempting signal came (asked of
        every rank: every rank must call it at the same step)."""
        self.preempted = preemption_asked()
        return self.preempted is not None or (self.every > 0 and step % self.every == 0)

    def save(self, state: dict) -> None:
        """Write `state` (rank 0 of a distributed run; the others wait for it)."""
        if distributed.is_main():
            self._write(state)
        distributed.barrier()

    def _fresh_tmp(self) -> Path:
        tmp = self.folder / "state.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        return tmp

    def _write(self, state: dict, tmp: Path | None = None) -> None:
        """`state` to state.pt in `tmp` (made afresh when None), then `tmp` becomes `state/`."""
        tmp = tmp or self._fresh_tmp()
        final, old = self.folder / "state", self.folder / "state.old"
        torch.save(state, tmp / "state.pt")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        for aside in self.folder.glob("state*.corrupt-*"):  # a good state exists again
            shutil.rmtree(aside, ignore_errors=True)

    def save_training(self, policy, optimizer, step: int, history: list, scheduler=None, **extra) -> None:
        """Save everything a training loop needs to continue after step `step` (`history`: RunHistory.state()).
        Under ddp the replicas' weights are checked first (a checksum each): ranks that drifted apart stop the run.
        Under fsdp2 each rank writes its shards to `state.tmp/dcp/` first, then rank 0 the rest and the rename."""
        drifted = distributed.replicas_differ(policy)
        if drifted:
            raise RuntimeError(
                f"ddp replicas disagree at step {step}: ranks {drifted} hold other weights than rank 0 (a checksum "
                "of every parameter); nothing was saved"
            )
        state = {
            "rng": distributed.gather([rng_state()]),  # each rank's: under ddp rank r draws from cuda:r's generator
            "step": step,
            "history": history,
            **extra,
        }
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        if not distributed.is_sharded(policy):
            state["model"] = distributed.model_state(policy)
            state["optimizer"] = distributed.optimizer_state(policy, optimizer)
            self.save(state)
        else:
            tmp = self._fresh_tmp() if distributed.is_main() else None
            distributed.barrier()
            shards = self.folder / "state.tmp" / SHARDS
            distributed.save_sharded(policy, optimizer, shards)  # a collective: every rank's files are written after it
            if distributed.is_main():
                self._write({**state, "shards": _shard_files(shards)}, tmp)
            distributed.barrier()
        if self.preempted:
            raise Preempted(f"{self.preempted}: checkpointed after step {step}", step)

    def restore_training(self, policy, optimizer, scheduler=None) -> dict:
        """Load the last saved state into the objects and return it ({} when there is none)."""
        state = self.load(distributed.is_sharded(policy))
        if not state:
            return {}
        if "shards" in state:  # fsdp2 wrote it: every rank reads its part, in whatever layout this run has
            try:
                distributed.load_sharded(policy, optimizer, self.loaded / SHARDS)
            except Exception as err:  # DCP raises on every rank; the weights may be half loaded: no resume now
                where = self._set_aside(self.loaded) if distributed.is_main() else self.loaded
                raise UnreadableShards(
                    f"{self.loaded / SHARDS} could not be loaded ({type(err).__name__}: {str(err)[:200]}); "
                    f"moved to {where}"
                ) from err
        else:
            distributed.load_states(policy, optimizer, state["model"], state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        set_rng_state(_this_ranks(state["rng"]))
        return state
