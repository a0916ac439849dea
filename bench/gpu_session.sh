#!/usr/bin/env bash
# The next GPU session's one command (the GPU halves of issues #27 and #28), on the device machine from the
# repository root, with the tokenizer carried along (models/ is DVC's, not git's; the weights are not needed):
#
#   run(command="bash bench/gpu_session.sh", timeout_s=560,
#       carry=["models/base/tokenizer.json", "models/base/tokenizer_config.json"])
#
# It uses the machine's own torch and transformers (requirements/gpu.lock pins another torch; nothing is installed).
# Each part has its own time limit, so one that hangs leaves time for the next; each rewrites its JSON as it goes:
#   $OUT/env.txt            the GPU, driver, torch, transformers and what else of the stack is there
#   $OUT/gpu_budget.json    bench/gpu_budget.py: handout split vs micro_batch_tokens auto (packed, checkpointing, grouped),
#                           peak GB vs the plan, the GPU's busy share; NCCL on a group of one; fsdp2 on a mesh of one
#   $OUT/gpu_memory.json    bench/gpu_check.py --parts memory: the plan's formula at the handout's micro-batch
# ROLLOUTS=128 halves the budget part's steps if the first try runs out of time.
set -u
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__)"
    python -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|triton|vllm|flash|liger|torchao|accelerate)" || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
start=$(date +%s)
timeout 400 python bench/gpu_budget.py --tokenizer models/base --rollouts "${ROLLOUTS:-0}" --out "$OUT/gpu_budget.json"
echo "gpu_budget: rc=$? in $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout 90 python bench/gpu_check.py --tokenizer models/base --parts memory --out "$OUT/gpu_memory.json" | tail -3
echo "gpu_check memory: rc=${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"
