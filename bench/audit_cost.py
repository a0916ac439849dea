"""What the grader audit costs beside the grading it audits, on real rollouts: `python -m bench.audit_cost`.

- The responses: every EI round's rollouts of the default DAG (`results/ei/*/round_*/rollouts.parquet`, 240 of them),
  with their questions' ground truths (`data/prepared/train.parquet`); run `dvc repro` (or `dvc pull`) first.
- One pool with one grading worker and one audit worker (`GraderPool(audit=True)`, both warmed up); each repetition
  times `pool.map` (the reward) and then `pool.audit` (the strict rule and math-verify) on the same responses, and
  prints the ratio, the figure that stands on a shared machine (both run under the same load).
"""

from __future__ import annotations

import argparse
import glob
import time

import pyarrow.parquet as pq

from a5core.grader import GraderPool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    truth = {r["unique_id"]: r["answer"] for r in pq.read_table("data/prepared/train.parquet").to_pylist()}
    rows = [r for f in sorted(glob.glob("results/ei/*/round_*/rollouts.parquet")) for r in pq.read_table(f).to_pylist()]
    if not rows:
        raise SystemExit("no EI rollouts under results/ei: run `dvc repro` first")
    texts, gts = [r["response"] for r in rows], [truth[r["unique_id"]] for r in rows]
    with GraderPool(workers=1, timeout_s=5.0, audit=True) as pool:
        pool.map(texts[:4], gts[:4])  # both pools started and warm before the clock
        pool.audit(texts[:4], gts[:4], "r1_zero")
        for rep in range(a.reps):
            t0 = time.perf_counter()
            pool.map(texts, gts)
            t1 = time.perf_counter()
            audits = pool.audit(texts, gts, "r1_zero")
            t2 = time.perf_counter()
            print(
                f"rep {rep}: {len(texts)} responses: grading {t1 - t0:.2f} s, audit {t2 - t1:.2f} s, "
                f"audit / grading {(t2 - t1) / (t1 - t0):.2f}"
            )
    judged = sum(r is not None and r.get("verified") is not None for r in audits)
    print(f"responses with an answer for math-verify to judge: {judged} of {len(audits)}")


if __name__ == "__main__":
    main()
