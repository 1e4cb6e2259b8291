#!/usr/bin/env bash
# Builds on this (GPU-less) machine everything scripts/gpu-check.sh runs on the GPU machine and stages it
# in .gpu/ (git-ignored, carried to the device): .gpu/bin.txz with the test and bench binaries (sm_80 +
# sm_90a; xz with a large window, because the binaries share most of their kernels: ~20 MB against
# gzip's ~87 MB, and the carried tree is limited to 64 MiB) and .gpu/wheels/ with a Python 3.12
# wheel of the package (the GPU machine runs Python 3.12 and has no package index). Built without
# -march=native: the GPU host is another CPU.
# Usage: [BUILD=build-stage] [WHEEL_BUILD=build-stage-wheel] [ARCHS="80;90a"] scripts/stage-gpu.sh [--no-wheel]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
BUILD=${BUILD:-build-stage}
.venv/bin/cmake -S . -B "$BUILD" -G Ninja -DCMAKE_MAKE_PROGRAM="$PWD/.venv/bin/ninja" -DFLASHATTN_CUDA=ON \
  -DFLASHATTN_CUDA_ARCHS="${ARCHS:-80;90a}" -DFLASHATTN_NATIVE=OFF >/dev/null
.venv/bin/cmake --build "$BUILD" -j "$(nproc)" --target flashattn_tests flashattn-bench
# Context-parallel GPU programs, when MPI / NCCL were found (docs/distributed.md): the MPI test programs
# (2 ranks sharing the GPU) and the ring-overhead benchmark.
dist_targets=(flashattn_dist_mpi_cuda_tests flashattn_dist_mpi_cuda_ring_tests ring_overhead)
for t in "${dist_targets[@]}"; do
  .venv/bin/cmake --build "$BUILD" -j "$(nproc)" --target "$t" >/dev/null 2>&1 || echo "stage-gpu: no target $t" >&2
done
stage=$(mktemp -d)
cp "$BUILD/tests/cpp/flashattn_tests" "$BUILD/tools/bench/flashattn-bench" "$stage/"
for t in "${dist_targets[@]}"; do
  f=$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] && cp "$f" "$stage/"
done
strip --strip-debug "$stage"/*
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- src include tests tools python || commit="$commit-dirty"
echo "$commit" >"$stage/COMMIT"
mkdir -p .gpu
rm -f .gpu/bin.tgz
tar -cf - -C "$stage" . | xz -9 -T0 >.gpu/bin.txz
rm -rf "$stage"

if [ "${1:-}" != "--no-wheel" ]; then
  # pyenv installs shims for interpreters that are not active; find one that really runs.
  PY312=""
  for cand in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY312=$cand; break; fi
  done
  if [ -z "$PY312" ]; then
    echo "stage-gpu: no Python 3.12 here: no wheel staged" >&2
  else
    [ -x .venv312/bin/python ] || "$PY312" -m venv .venv312
    .venv312/bin/python -m pip install -q -r requirements-dev.txt
    rm -rf .gpu/wheels && mkdir -p .gpu/wheels
    .venv312/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .gpu/wheels \
      -C cmake.define.FLASHATTN_CUDA=ON -C cmake.define.FLASHATTN_CUDA_ARCHS=90a -C cmake.define.FLASHATTN_NATIVE=OFF \
      -C build-dir="${WHEEL_BUILD:-build-stage-wheel}" .
  fi
fi
du -sh .gpu/* | sed 's/^/stage-gpu: /'
