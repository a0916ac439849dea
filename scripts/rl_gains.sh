#!/usr/bin/env bash
# The RL gains: the cpu-rl-gains profile's DAG (conf/profile/cpu-rl-gains.yaml) in a clone of this commit (.rl_gains/,
# so this workspace keeps the default profile's results), then each RL run's gain over its start, the three gains one
# Holm-corrected family (tools/ablations.py: means over the 3 seeds, hierarchical bootstrap over seeds, then
# questions), its summary and figures copied into reports/rl_gains/. Stages are cached and resume: rerunning the
# script continues where it stopped. GRPO's seeds run first, then EI's, so a run cut short keeps whole families.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$ROOT/.rl_gains
. scripts/clone.sh
enter_clone "$DIR"
python -m tools.profile cpu-rl-gains
start=$(date +%s)
for targets in grpo@reinforce_baseline grpo_replicate ei_round_5@G4 "--glob ei_replicate_5@G4-*" ""; do
  dvc repro $targets 2>&1 | tee -a "$DIR/rl_gains.log"
done
echo "dvc repro: $(( $(date +%s) - start )) s" | tee -a "$DIR/rl_gains.log"
mkdir -p "$ROOT/reports/rl_gains"
rm -rf "$ROOT/reports/rl_gains/figures"
cp -r reports/summary.md reports/figures "$ROOT/reports/rl_gains/"
python -m tools.ablations --out "$ROOT/reports/rl_gains/gains.md" \
  --pair grpo_reinforce_baseline:sft_filtered --pair ei_G4:sft_filtered --pair ei_G8:sft_filtered
cp "$DIR/rl_gains.log" "$ROOT/reports/rl_gains/rl_gains.log"
