#!/usr/bin/env bash
# Builds on this (GPU-less) machine everything scripts/gpu-check.sh runs on the GPU machine, and stages it
# in .gpu/ (git-ignored, carried to the device): the test and bench binaries (sm_80 + sm_90a) and a
# Python 3.12 wheel of the package (the GPU machine runs Python 3.12 and has no package index).
# Usage: scripts/stage-gpu.sh [--no-wheel]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
BUILD=build-stage
.venv/bin/cmake -S . -B $BUILD -G Ninja -DCMAKE_MAKE_PROGRAM="$PWD/.venv/bin/ninja" -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHS="80;90a" >/dev/null
.venv/bin/cmake --build $BUILD -j "$(nproc)" --target flashattn_tests flashattn-bench
rm -rf .gpu/bin && mkdir -p .gpu/bin
cp $BUILD/tests/cpp/flashattn_tests $BUILD/tools/bench/flashattn-bench .gpu/bin/
strip --strip-debug .gpu/bin/* 2>/dev/null || true
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- src include tests tools python || commit="$commit-dirty"
echo "$commit" >.gpu/bin/COMMIT

if [ "${1:-}" != "--no-wheel" ]; then
  PY312=$(command -v python3.12 || true)
  if [ -z "$PY312" ]; then
    echo "stage-gpu: no python3.12 here: no wheel staged" >&2
  else
    [ -x .venv312/bin/python ] || "$PY312" -m venv .venv312
    .venv312/bin/python -m pip install -q -r requirements-dev.txt
    rm -rf .gpu/wheels && mkdir -p .gpu/wheels
    .venv312/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .gpu/wheels \
      -C cmake.define.FLASHATTN_CUDA=ON -C cmake.define.FLASHATTN_CUDA_ARCHS=90a \
      -C build-dir=build-stage-wheel .
  fi
fi
du -sh .gpu/* | sed 's/^/stage-gpu: /'
