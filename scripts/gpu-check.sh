#!/usr/bin/env bash
# The GPU harness: on a machine with an NVIDIA GPU, in one run (budget: < 10 minutes on an H200):
#   1. device facts,
#   2. the GPU tests (every CUDA backend against the fp64 CPU reference, the whole catalogue),
#   3. compute-sanitizer memcheck, racecheck, synccheck and initcheck on the reduced smoke suite,
#   4. the benchmark: the seed's table and the FlashAttention sweep (D = 64, 128), JSON out,
#   5. the Python package against PyTorch (torch tests, compare_torch.py) when a wheel or build is there,
#   6. a summary (device, date, commit, commands, tables) for bench/results/.
#
# Binaries come from $BIN (default: .gpu/bin, staged on a build machine by scripts/stage-gpu.sh), or
# are built here with --build. Results go to $OUT (default ./gpu-check-out): summary.md, bench JSON,
# and logs.tar.gz with every log.
#
# Usage: scripts/gpu-check.sh [--build] [--skip-sanitizer] [--skip-bench] [--skip-python]
#                             [--tests FILTER] [--sweep-impl LIST] [--compare-args "ARGS"]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
BIN=${BIN:-$ROOT/.gpu/bin}
LOGS=$(mktemp -d)
do_build=0 do_sanitizer=1 do_bench=1 do_python=1
test_filter='*cuda*:*Cuda*:*GpuSmoke*'
sweep_impl=''
compare_args=''
while (($#)); do
  case $1 in
    --build) do_build=1 ;;
    --skip-sanitizer) do_sanitizer=0 ;;
    --skip-bench) do_bench=0 ;;
    --skip-python) do_python=0 ;;
    --tests) test_filter=$2; shift ;;
    --sweep-impl) sweep_impl=$2; shift ;;
    --compare-args) compare_args=$2; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
SUMMARY=$OUT/summary.md
start=$(date +%s)
failures=()

# step NAME TIMEOUT_S COMMAND...: runs a command with its log in $LOGS/NAME.log, records pass/fail.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  echo "=== $name: $*" | tee -a "$LOGS/steps.log"
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  if ((rc == 0)); then
    echo "    ok (${dt}s)" | tee -a "$LOGS/steps.log"
  else
    echo "    FAILED rc=$rc (${dt}s); last lines:" | tee -a "$LOGS/steps.log"
    tail -n 25 "$LOGS/$name.log" | sed 's/^/    | /' | tee -a "$LOGS/steps.log"
    failures+=("$name")
  fi
  return $rc
}

if ((do_build)); then
  BUILD_DIR=$ROOT/build-gpu
  step build 900 bash -c "cmake -S . -B '$BUILD_DIR' -G Ninja -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS='90a' \
      -DFLASHATTN_PYTHON=OFF && cmake --build '$BUILD_DIR' -j \$(nproc)"
  BIN=$BUILD_DIR/bin-staged
  mkdir -p "$BIN"
  cp "$BUILD_DIR/tests/cpp/flashattn_tests" "$BUILD_DIR/tools/bench/flashattn-bench" "$BIN/" 2>/dev/null
fi
TESTS=$BIN/flashattn_tests
BENCH=$BIN/flashattn-bench
commit=$(cat "$BIN/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)

step device 60 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

if [ -x "$TESTS" ]; then
  step gpu-tests 360 "$TESTS" --gtest_filter="$test_filter" --gtest_brief=1 --gtest_output="xml:$LOGS/gpu-tests.xml"
  if ((do_sanitizer)); then
    for tool in memcheck racecheck synccheck initcheck; do
      step "sanitizer-$tool" 240 compute-sanitizer --tool "$tool" --error-exitcode 99 \
        "$TESTS" --gtest_filter='*GpuSmoke*' --gtest_brief=1
    done
  fi
else
  echo "gpu-check: no test binary at $TESTS" | tee -a "$LOGS/steps.log"
  failures+=(missing-tests)
fi

if ((do_bench)) && [ -x "$BENCH" ]; then
  step bench-seed 120 "$BENCH" --device cuda --json "$OUT/bench-seed.json"
  impl_args=()
  [ -n "$sweep_impl" ] && impl_args=(--impl "$sweep_impl")
  step bench-sweep 300 "$BENCH" --device cuda --sweep --dims 64,128 --mode fwd "${impl_args[@]}" \
    --json "$OUT/bench-sweep.json"
fi

if ((do_python)); then
  wheel=$(ls "$ROOT"/.gpu/wheels/flashattn-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    step python-install 120 python3 -m pip install -q --no-deps --no-index --target /tmp/fa-site "$wheel" &&
      export PYTHONPATH=/tmp/fa-site:${PYTHONPATH:-}
    step python-tests 300 python3 -m pytest -q -x tests/python
    step compare-torch 420 python3 bench/compare_torch.py --out "$OUT" $compare_args
  else
    echo "gpu-check: no wheel in .gpu/wheels: Python steps skipped" | tee -a "$LOGS/steps.log"
  fi
fi

{
  echo "# gpu-check summary"
  echo
  echo "- device: $device_name"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $commit"
  echo "- command: scripts/gpu-check.sh $*"
  echo "- wall time: $(($(date +%s) - start)) s"
  echo "- failed steps: ${failures[*]:-none}"
  echo
  echo '```'
  cat "$LOGS/steps.log"
  echo '```'
  for f in bench-seed bench-sweep; do
    if [ -f "$LOGS/$f.log" ]; then
      echo
      echo "## $f"
      echo '```'
      cat "$LOGS/$f.log"
      echo '```'
    fi
  done
  grep -h -E "tests? (ran|PASSED|FAILED)|^\[  (PASSED|FAILED|SKIPPED)" "$LOGS/gpu-tests.log" 2>/dev/null | head -60 |
    sed '1i\\n## gpu tests\n```' | sed '$a```'
} >"$SUMMARY"
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
echo "gpu-check: done in $(($(date +%s) - start)) s; failed: ${failures[*]:-none}"
((${#failures[@]} == 0))
