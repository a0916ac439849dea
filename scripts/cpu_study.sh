#!/usr/bin/env bash
# The CPU study: the cpu-study profile's DAG in a clone of this commit (so this workspace keeps the default profile's
# results), then its summary, figures, metrics and timing copied into reports/cpu_study/, and the ablation contrasts
# (each run against its family's reference, tools/ablations.py) written there. Stages are cached and resume:
# rerunning the script continues where it stopped (it reuses .study/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STUDY=$ROOT/.study
. scripts/clone.sh
enter_clone "$STUDY"
python -m tools.profile cpu-study
start=$(date +%s)
# the replicated GRPO runs and their seed replicates first: a study cut short keeps what its main verdicts rest on
first=$(python -c 'import yaml; print(" ".join(f"grpo@{r}" for r in yaml.safe_load(open("params.yaml"))["replicates"]["grpo_runs"]))')
for target in $first grpo_replicate; do dvc repro "$target" 2>&1 | tee -a "$STUDY/study.log"; done
dvc repro 2>&1 | tee -a "$STUDY/study.log"
echo "dvc repro: $(( $(date +%s) - start )) s" | tee -a "$STUDY/study.log"
mkdir -p "$ROOT/reports/cpu_study"
rm -rf "$ROOT/reports/cpu_study/figures"
cp -r reports/summary.md reports/figures "$ROOT/reports/cpu_study/"
python -m tools.ablations --out "$ROOT/reports/cpu_study/ablations.md" --pair sft_filtered:sft_full
dvc metrics show --json > "$STUDY/metrics_shown.json"
python - "$STUDY/metrics_shown.json" "$ROOT/reports/cpu_study/metrics.json" <<'PY'
# Only the metrics this profile's dvc.yaml declares (the clone also holds the default profile's committed results).
import json, pathlib, sys
shown = json.loads(pathlib.Path(sys.argv[1]).read_text())
out = {}
for path, entry in sorted(next(iter(shown.values()))["data"].items()):
    details = pathlib.Path(path).parent / "details.json"
    out[str(pathlib.Path(path).parent)] = {**entry["data"], **(json.loads(details.read_text()) if details.exists() else {})}
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + "\n")
PY
cp "$STUDY/study.log" "$ROOT/reports/cpu_study/study.log"
