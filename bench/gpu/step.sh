#!/usr/bin/env bash
# The GPU sequence, one numbered step per device run (bench/gpu/README.md has the run calls, their order and times).
#
#   bash bench/gpu/step.sh 0 .bundle/pI   # transfer: store part I of the offline bundle; the last one installs it
#   bash bench/gpu/step.sh 1              # vLLM: bench/vllm_check.py on a random-weights Qwen2.5-Math-1.5B folder
#   bash bench/gpu/step.sh 2              # learner: NCCL/fsdp2 world of one, a GRPO step's memory against the plan,
#                                         #   the micro-batch budget's settings
#   bash bench/gpu/step.sh 3              # one full-profile GRPO step (256 rollouts), its time split
#
# Each step has its own time limit (STEP_LIMITS, seconds; SIGKILL 10 s after SIGTERM) inside the run's, writes its
# outputs and a log under $OUT, and appends {"step", "rc", "seconds"} to $OUT/steps.jsonl. Work files live in
# $A5_GPU_WORK (default /tmp/a5-gpu, kept while the machine stays warm: the model folder of step 1 serves steps 2 and 3).
# A5_GPU_DRY_RUN=1: the CPU dry run (tests/test_gpu_sequence.py): the same steps at tiny sizes, vLLM's CPU build and
# this environment's packages (step 0 installs into a scratch folder and checks the import of a5core only).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/a5-gpu-out}
WORK=${A5_GPU_WORK:-/tmp/a5-gpu}
SITE=${A5_SITE:-/tmp/site}
PY=${PYTHON:-python3}
DRY=${A5_GPU_DRY_RUN:-0}
mkdir -p "$OUT" "$WORK"
declare -A STEP_LIMITS=([0]=150 [1]=230 [2]=230 [3]=230)
SIZE=full
FLAGS=()
ROLLOUTS=64  # step 2's GRPO steps (a quarter of the full profile's batch: the budget part times 5 settings)
if [ "$DRY" = 1 ]; then  # the CPU, shared with whatever else runs there: the limits are the GPU's concern
    SIZE=tiny; FLAGS=(--dry-run); ROLLOUTS=8; STEP_LIMITS=([0]=500 [1]=500 [2]=500 [3]=500)
fi
export PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 VLLM_HOST_IP=127.0.0.1 TOKENIZERS_PARALLELISM=false
step=${1:?usage: bash bench/gpu/step.sh 0 PART_DIR | 1 | 2 | 3}
limit=${STEP_LIMITS[$step]:?no step $step}
log="$OUT/step$step.log"
start=$(date +%s)

bundled() {  # steps 1-3 need the bundle step 0 installed (gone if the machine went back between runs)
    [ "$DRY" = 1 ] || [ -f "$SITE/a5-bundle.json" ] || {
        echo "no bundle in $SITE (the machine went cold?): run step 0 for every part again"; return 2; }
}

model() {  # the random-weights folder steps 1-3 share (built once per warm machine)
    [ -f "$WORK/qwen/config.json" ] || "$PY" "$ROOT/bench/gpu/prepare.py" model --out "$WORK/qwen" --size "$SIZE"
}

run_step() {
    case "$step" in
    0)
        local imports=(vllm a5core)
        [ "$DRY" = 1 ] && imports=(a5core)
        "$PY" "$ROOT/tools/offline_bundle.py" receive "${2:?the folder of a part}" --stage "$WORK/bundle" \
            --target "$SITE" --python "$PY" --imports "${imports[@]}"
        ;;
    1)
        bundled || return 2
        model || return 3
        "$PY" "$ROOT/bench/vllm_check.py" --model "$WORK/qwen" --out "$OUT/vllm_check.json" --cycles 2 \
            --prompts 16 --n 8 --max-tokens 256 --greedy-prompts 4 --greedy-tokens 32
        ;;
    2)
        bundled || return 2
        model || return 3
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
        "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
        local rc=0
        # --foreground: each part stays in the step's process group, so the step's own limit reaches it too
        timeout --foreground -k 10 60 "$PY" "$ROOT/bench/gpu_budget.py" --tokenizer "$WORK/qwen" \
            --out "$OUT/learner_distributed.json" --parts distributed --rollouts "$ROLLOUTS" "${FLAGS[@]}" || rc=$?
        timeout --foreground -k 10 45 "$PY" "$ROOT/bench/gpu_check.py" --tokenizer "$WORK/qwen" --out "$OUT/learner_memory.json" \
            --parts memory "${FLAGS[@]}" || rc=$?
        timeout --foreground -k 10 110 "$PY" "$ROOT/bench/gpu_budget.py" --tokenizer "$WORK/qwen" --out "$OUT/learner_budget.json" \
            --parts budget --rollouts "$ROLLOUTS" "${FLAGS[@]}" || rc=$?
        return $rc
        ;;
    3)
        bundled || return 2
        model || return 3
        mkdir -p "$WORK/step3/data/external/math" && cd "$WORK/step3" || return 3
        cp "$ROOT"/tests/fixtures/math/*.jsonl data/external/math/
        "$PY" "$ROOT/bench/gpu/prepare.py" params --out params.yaml --size "$SIZE" || return 3
        "$PY" "$ROOT/stages/prepare_math.py" --params params.yaml --train data/prepared/train.parquet \
            --validation data/prepared/validation.parquet --sft data/prepared/sft.parquet \
            --report data/prepared/report.json --record run_records/prepare_math || return 3
        rm -rf models/grpo_step results/grpo/step run_records/grpo/step scratch/grpo_step
        "$PY" -m a5core.stage.launch "$ROOT/stages/grpo.py" --params params.yaml --run step --model "$WORK/qwen" \
            --train data/prepared/train.parquet --validation data/prepared/validation.parquet \
            --out models/grpo_step --metrics results/grpo/step/metrics.json --live results/grpo/step/live \
            --logs results/grpo/step/logs --scratch scratch/grpo_step --record run_records/grpo/step || return 4
        "$PY" "$ROOT/bench/gpu/prepare.py" grpo-summary --timing run_records/grpo/step \
            --metrics results/grpo/step/metrics.json --out "$OUT/grpo_step.json"
        ;;
    esac
}

if [ -n "${A5_STEP_INNER:-}" ]; then  # the step itself, under the limit below
    run_step "$@"
    exit $?
fi
A5_STEP_INNER=1 timeout -k 10 "$limit" bash "$0" "$@" > "$log" 2>&1
rc=$?
seconds=$(( $(date +%s) - start ))
echo "{\"step\": $step, \"rc\": $rc, \"seconds\": $seconds}" >> "$OUT/steps.jsonl"
tail -n 25 "$log"
echo "step $step: rc=$rc in ${seconds}s (limit ${limit}s); log $log"
exit $rc
