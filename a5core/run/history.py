"""A training run's history: the rows it logs, where they go, and what the console shows while it runs.

`RunHistory` owns every row a loop logs ("train" per optimizer step, "eval" per evaluation, and sampled validation
completions) and writes each one through, as it is logged, to:
- dvclive (`<live>/plots/metrics/<namespace>/<name>.tsv`, x = `step`, the optimizer step; `<live>/metrics.json`), which
  `dvc plots`, the VS Code extension and DVC Studio read live;
- `<logs>/<kind>.csv`, the whole rows but their wall-clock fields, which the plots stage and the next EI round read;
- `<timing>/timing_<kind>.csv`, the measured fields (`*_s`: seconds, rates per second; `*_gb`: CUDA memory) by step,
  in the stage's run-record folder (a5core/base/run_record.py). They are not a function of the stage's inputs, so
  they stay out of every file a later stage hashes, and out of dvclive;
- TensorBoard event files in `<live>/tensorboard` when `logging.tracker: tensorboard` (offline);
- the console: one line per `console_every` optimizer steps with loss, reward, accuracy so far, entropy, tokens/s, ETA.
It is checkpointable (`state()` / `restore()`): a resumed run replays its rows into every sink, so its files equal an
uninterrupted run's, and it counts optimizer steps itself (`optimizer_steps`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from pathlib import Path

from a5core.base.artifacts import write_text
from a5core.config.sections import LoggingConfig

CONSOLE_FIELDS = (  # (row key, label, format) of the console line, when the row has the key
    ("train/loss", "loss", "{:.4f}"),
    ("rollout/reward", "reward", "{:.3f}"),
    ("train/lr", "lr", "{:.2e}"),
    ("train/entropy", "entropy", "{:.3f}"),
    ("train/grad_norm", "grad", "{:.3f}"),
    ("perf/tokens_per_s", "tok/s", "{:.0f}"),
)
# Every row key but `step` is `<namespace>/<name>`, one name per quantity in every row and file: `train/` the
# optimizer step, `rollout/` the step's samples, `eval/` a validation, `perf/` speed, `count/` bookkeeping. The
# namespace decides the sinks: `count/` stays in the CSV logs (not a curve), `*_s` timings stay out of dvclive.
NAMESPACES = ("train", "rollout", "eval", "perf", "count")


def plotted(key: str) -> bool:
    """A curve in dvclive (and TensorBoard): not bookkeeping (`count/`)."""
    return key.split("/", 1)[0] != "count"


def is_timing(key: str) -> bool:
    """What the machine measured rather than what the inputs determine: seconds (`rollout_s`, `wall_s`) and rates per
    second (`tokens_per_s`) end in `_s`, device memory readings (`peak_update_gb`, CUDA only) in `_gb`."""
    return key.endswith(("_s", "_gb"))


def timings(row: dict) -> dict:
    """The measured fields (`is_timing`) of a row or result."""
    return {k: v for k, v in row.items() if is_timing(k)}


def timing_log(logs_dir: str | Path, kind: str) -> Path:
    return Path(logs_dir) / f"timing_{kind}.csv"


def _numeric(row: dict) -> dict:
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _flat(row: dict) -> dict:
    return {k: v for k, v in row.items() if isinstance(v, (int, float, str, bool)) or v is None}


class RunHistory:
    """See the module docstring. `name` prefixes console lines; `total_steps` gives the ETA."""

    def __init__(
        self,
        live_dir: str | Path,
        logs_dir: str | Path,
        *,
        name: str,
        total_steps: int,
        cfg: LoggingConfig | None = None,
        write: bool = True,
        timing_dir: str | Path | None = None,
    ):
        """`write` False: rows are kept in memory only (ranks other than 0 of a distributed run). `timing_dir`: where
        `timing_<kind>.csv` go (the stage's run-record folder; default `logs_dir`)."""
        from dvclive import Live

        self.cfg = cfg or LoggingConfig()
        self.name, self.total_steps, self.write = name, total_steps, write
        self.logs_dir = Path(logs_dir)
        self.timing_dir = Path(timing_dir) if timing_dir is not None else self.logs_dir
        self.rows: dict[str, list[dict]] = {"train": [], "eval": []}
        self.order: list[str] = []  # the kind of every row, in the order logged: a replay keeps it (dvclive's summary)
        self.completions: list[dict] = []
        self.live, self.tb = None, None
        self._clock: tuple[float, int] | None = None  # (time, step) of the first row this process logged
        if not write:
            return
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        for stale in [*self.logs_dir.glob(".*.csv.*"), *self.logs_dir.glob(".*.jsonl.*")]:
            stale.unlink()  # a temp file of an atomic write that a killed process left (artifacts._atomic_target)
        self.live = Live(dir=str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)
        if self.cfg.tracker == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(Path(live_dir) / "tensorboard"))

    @property
    def optimizer_steps(self) -> int:
        return len(self.rows["train"])

    def log(self, kind: str, row: dict, *, echo: bool = True) -> None:
        """Record one row (it must have `step`, the optimizer step) and write it to every sink."""
        bad = [k for k in row if k != "step" and k.split("/", 1)[0] not in NAMESPACES]
        if bad:
            raise ValueError(f"row keys must be <namespace>/<name> with a namespace in {NAMESPACES}: {bad}")
        row = _flat(row)
        self.rows.setdefault(kind, []).append(row)
        self.order.append(kind)
        if not self.write:
            return
        step = int(row["step"])
        self.live.step = step
        for key, value in _numeric(row).items():
            if key == "step" or not plotted(key):
                continue
            if not is_timing(key):  # dvclive's files are DVC outputs: wall-clock values would change them
                self.live.log_metric(key, value)
            if self.tb is not None:
                self.tb.add_scalar(key, value, step)
        self.live.make_summary()
        self._write_csv(kind)
        if echo and kind == "train":
            self._console(row)

    def log_completions(self, step: int, samples: list[dict]) -> None:
        """A sample of validation generations at one evaluation (prompt, response, reward, entropy, ...)."""
        self.completions.extend({"step": step, **_flat(s)} for s in samples)
        if not self.write:
            return
        lines = "".join(json.dumps(c) + "\n" for c in self.completions)
        write_text(lines, self.logs_dir / "completions.jsonl")

    def last(self, kind: str, key: str):
        """The latest value of `key` among `kind` rows, or None."""
        for row in reversed(self.rows.get(kind, [])):
            if key in row:
                return row[key]
        return None

    def state(self) -> dict:
        rows = {k: list(v) for k, v in self.rows.items()}
        return {"rows": rows, "order": list(self.order), "completions": list(self.completions)}

    def restore(self, state: dict | None) -> None:
        """Replay a checkpointed history into every sink (no console lines)."""
        if not state:
            return
        # in the order they were logged, so every sink (dvclive's summary's key order too) equals an uninterrupted run's
        order = state.get("order") or [k for k, rows in state["rows"].items() for _ in rows]
        seen = {kind: iter(rows) for kind, rows in state["rows"].items()}
        for kind in order:
            self.log(kind, next(seen[kind]), echo=False)
        if state["completions"]:
            self.completions = []
            steps = sorted({c["step"] for c in state["completions"]})
            for step in steps:
                self.log_completions(step, [c for c in state["completions"] if c["step"] == step])

    def close(self) -> None:
        if self.live is not None:
            self.live.end()
        if self.tb is not None:
            self.tb.close()

    def __enter__(self) -> RunHistory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write_csv(self, kind: str) -> None:
        rows = self.rows[kind]
        write_csv([{k: v for k, v in r.items() if not is_timing(k)} for r in rows], self.logs_dir / f"{kind}.csv")
        timed = [{"step": r["step"], **{k: v for k, v in r.items() if is_timing(k)}} for r in rows]
        if any(len(t) > 1 for t in timed):
            write_csv(timed, timing_log(self.timing_dir, kind))

    def _console(self, row: dict) -> None:
        step = int(row["step"])
        now = time.monotonic()
        if self._clock is None:  # the rate needs a step that started in this process: the first one only starts it
            self._clock = (now, step)
        if step % self.cfg.console_every and step != self.total_steps:
            return
        t0, s0 = self._clock
        parts = [f"[{self.name}] step {step}/{self.total_steps}"]
        parts += [label + " " + fmt.format(row[key]) for key, label, fmt in CONSOLE_FIELDS if _finite(row.get(key))]
        accuracy = self.last("eval", "eval/accuracy")
        if accuracy is not None:
            parts.append(f"val acc {accuracy:.3f}")
        if step > s0:
            per_step = (now - t0) / (step - s0)
            parts.append(f"{per_step:.1f} s/step, ETA {_clock(per_step * (self.total_steps - step))}")
        print(" | ".join(parts), flush=True)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def write_csv(rows: list[dict], path: str | Path) -> None:
    """Rows as a CSV file (columns: every key, in first-seen order), written atomically."""
    fields = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    write_text(buf.getvalue(), path)


def read_log(path: str | Path) -> list[dict]:
    """The rows of a history CSV, numbers as int or float (other values stay strings); [] when there is no file."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(f)]


def read_rows(logs_dir: str | Path, kind: str, timing_dir: str | Path | None = None) -> list[dict]:
    """`<kind>.csv`'s rows with their wall-clock fields from `<timing_dir>/timing_<kind>.csv` (when it has as many
    rows; `timing_dir` defaults to `logs_dir`)."""
    timing_path = timing_log(logs_dir if timing_dir is None else timing_dir, kind)
    rows, timing = read_log(Path(logs_dir) / f"{kind}.csv"), read_log(timing_path)
    if timing and [t["step"] for t in timing] != [r["step"] for r in rows]:
        print(
            f"warning: {timing_path} does not match {kind}.csv row for row (steps differ): its "
            "wall-clock values are left out",
            file=sys.stderr,
        )
        return rows
    return [{**r, **t} for r, t in zip(rows, timing)] if timing else rows


def _number(v: str):
    for tp in (int, float):
        try:
            return tp(v)
        except (TypeError, ValueError):
            pass
    return v
