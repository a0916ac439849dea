#!/usr/bin/env bash
# The CPU study: the cpu-study profile's DAG in a clone of this commit (so this workspace keeps the default profile's
# results), then its summary, figures, metrics and timing copied into reports/cpu_study/. Stages are cached and resume:
# rerunning the script continues where it stopped (it reuses .study/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STUDY=$ROOT/.study
[ -d "$STUDY/.git" ] || git clone -q "$ROOT" "$STUDY"
cd "$STUDY"
git fetch -q "$ROOT" HEAD && git checkout -q --detach FETCH_HEAD
ln -sfn "$ROOT/.venv" .venv
. .venv/bin/activate
python -m tools.profile cpu-study
start=$(date +%s)
dvc repro 2>&1 | tee -a "$STUDY/study.log"
echo "dvc repro: $(( $(date +%s) - start )) s" | tee -a "$STUDY/study.log"
mkdir -p "$ROOT/reports/cpu_study"
rm -rf "$ROOT/reports/cpu_study/figures"
cp -r reports/summary.md reports/figures "$ROOT/reports/cpu_study/"
python - "$ROOT/reports/cpu_study/metrics.json" <<'PY'
import json, pathlib, sys
out = {}
for f in sorted(pathlib.Path("results").rglob("metrics.json")):
    details = f.parent / "details.json"
    if "/live/" not in str(f):
        out[str(f.parent)] = {**json.loads(f.read_text()), **(json.loads(details.read_text()) if details.exists() else {})}
pathlib.Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")
PY
cp "$STUDY/study.log" "$ROOT/reports/cpu_study/study.log"
