"""Would one stage run on a new machine kind have calibrated the forecast? A replay from git history:
`python -m bench.forecast_calibration --before 8a92299 --after 48fe3b3 --calibrate sft@24 grpo@reinforce_baseline`.

- `--before`: a commit whose run records (results/**/run_record.json) and dvc.lock came from the old machine kind;
  `--after`: the commit of a full run on the new kind, whose params are forecast and whose records are the truth.
- For each `--calibrate` stage: the forecast (`a5core.checks.forecast.forecast`) from the old records with that one
  stage's record (and lock entry) taken from the new run, as if it alone had run on the new machine first; printed
  beside what the other stages took there: the total ratio and the per-stage range.
"""

from __future__ import annotations

import argparse
import json
import subprocess

import yaml

from a5core.base.run_record import machine_kind
from a5core.checks.forecast import forecast


def _show(rev: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True).stdout


def records_at(rev: str) -> dict[str, dict]:
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "results"], capture_output=True, text=True)
    found = (json.loads(text) for f in files.stdout.split() if f.endswith("run_record.json") if (text := _show(rev, f)))
    return {r["stage"]: r for r in found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--calibrate", nargs="+", required=True)
    a = ap.parse_args()
    old, new = records_at(a.before), records_at(a.after)
    old_lock, new_lock = (yaml.safe_load(_show(rev, "dvc.lock"))["stages"] for rev in (a.before, a.after))
    params = yaml.safe_load(_show(a.after, "params.yaml"))
    stages = [s for s in new if s in old]
    for stage in a.calibrate:
        here = machine_kind(new[stage]["machine"])
        lock = {"stages": {**old_lock, stage: new_lock[stage]}}
        rows = forecast(stages, params, lock, {**old, stage: new[stage]}, here)
        planned = {r["stage"]: r["seconds"] for r in rows if r["stage"] != stage and r["seconds"] is not None}
        took = {s: new[s]["duration_s"] for s in planned}
        ratios = sorted(took[s] / planned[s] for s in planned)
        print(
            f"calibrated by {stage}: {len(planned)} other stages forecast {sum(planned.values()) / 60:.1f} min, took "
            f"{sum(took.values()) / 60:.1f} min ({sum(took.values()) / sum(planned.values()):.2f} x); per stage "
            f"{ratios[0]:.2f}-{ratios[-1]:.2f} x"
        )


if __name__ == "__main__":
    main()
