#!/usr/bin/env bash
# The CPU leaderboard: the cpu-leaderboard profile's DAG (conf/profile/cpu-leaderboard.yaml) in a clone of this commit
# (.leaderboard/, so this workspace keeps the default profile's results), then its summary, figures and curve tables
# copied into reports/leaderboard/. Stages are cached and resume: rerunning the script continues where it stopped.
# Its seconds are the result: run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. scripts/clone.sh
enter_clone "$ROOT/.leaderboard"
python -m tools.profile cpu-leaderboard
start=$(date +%s)
dvc repro 2>&1 | tee -a "$ROOT/.leaderboard/leaderboard.log"
echo "dvc repro: $(( $(date +%s) - start )) s" | tee -a "$ROOT/.leaderboard/leaderboard.log"
rm -rf "$ROOT/reports/leaderboard"
mkdir -p "$ROOT/reports/leaderboard"
cp -r reports/summary.md reports/figures reports/curves reports/run_records.json "$ROOT/reports/leaderboard/"
cp "$ROOT/.leaderboard/leaderboard.log" "$ROOT/reports/leaderboard/leaderboard.log"
