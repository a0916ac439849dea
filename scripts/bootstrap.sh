#!/usr/bin/env bash
# Create .venv and install a5 with its CPU-only torch. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
if ! python -c "import a5core, torch, transformers, dvc, math_verify" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.a5-installed ]; then
  python -m pip install -q --upgrade pip
  # The CPU build of torch first and explicitly (a bare `torch` resolves to CUDA wheels).
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[dev]"
  touch .venv/.a5-installed
fi
# dvc needs a git repository; a tarball checkout gets one so that `dvc repro` works.
[ -d .git ] || git init -q
