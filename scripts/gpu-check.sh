#!/usr/bin/env bash
# The GPU harness: on a machine with an NVIDIA GPU, in one run, in priority order (each step has its own
# time limit and appends to $OUT as it goes, so a run cut short still returns what it did):
#   1. the GPU tests (every CUDA backend against the fp64 CPU reference),
#   2. PyTorch comparison of the prefill kernels (bench/compare_torch.py: SDPA flash and cuDNN),
#   3. the decode benchmark (bench/decode_bench.py),
#   4. flashattn-bench: the seed's table and a sweep of the CUDA ladder,
#   5. compute-sanitizer memcheck, racecheck, synccheck and initcheck on the reduced smoke suite,
#   6. the Python package's torch tests,
#   7. context parallelism on the GPU (dist): the CUDA ring tests, NCCL with one rank, 2 MPI ranks sharing
#      the GPU, and the ring-of-one overhead benchmark (examples/ring_overhead.cpp),
#   8. the GPU scale tests (GpuScale.*: tensors beyond 2^31 elements, head dim 256 at 2^20 tokens; tens of GB),
#   9. summary.md (device, date, commit, commands, failed steps) for bench/results/.
# Not in the default list: `--only sm90`, the checks of the Hopper forward cuda_sm90 (issue 28): the catalogue
# and its own tests forced onto it (also with the ping-pong off and with the intra-warpgroup overlap off),
# compute-sanitizer memcheck, racecheck and synccheck on its boundary and varlen tests (overlap off and on),
# the SASS check (scripts/sass-check.sh: HGMMA present, no local memory, registers), and its forward beside
# cuda_sm80 and PyTorch SDPA (bench/compare_torch.py) and in flashattn-bench (--impl cuda_sm90,cuda_sm80)
# with each combination of FLASHATTN_SM90_PINGPONG and FLASHATTN_SM90_OVERLAP (the overlap exists in the
# 64 bucket only). Its steps' limits add up to about 900 s: run it alone (`--only sm90`), over two device calls, or trim it
# with SM90_SANITIZERS and SM90_COMPARE_ARGS.
#
# Also not in the default list: `--only gate --gate-shards "9 10 11"`, shards of flash-attn's test file (issue
# 37, docs/compat.md), each shard's failures run again alone; ~95 s of an H100 per shard (carry
# tests/compat/.upstream).
#
# Binaries: .gpu/bin.txz (or .gpu/bin/) staged on a build machine by scripts/stage-gpu.sh, or built here
# with --build (needs GoogleTest). Python: the wheel in .gpu/wheels/, installed with --no-index.
#
# Usage: scripts/gpu-check.sh [--build] [--tests FILTER] [--only STEPS] [--limits "tests=110 compare=100 ..."]
#                             [--compare-args "ARGS"] [--decode-args "ARGS"] [--sweep-args "ARGS"]
#                             [--sanitizer-tests FILTER] [--sanitizer-shards N] [--gate-shards "K ..."]
#
# --sanitizer-shards N runs the four compute-sanitizer tools at once, each over N gtest shards of the
# filter (4N processes sharing the GPU, one OpenMP thread each, each with the whole sanitizer limit):
# the tools' cost is mostly host-side, so a whole backend's catalogue fits in one device call this way.
# Each process logs to sanitizer-TOOL-SHARD.log, all packed into $OUT/sanitizer-logs.tgz (the device
# tool returns at most 8 files from $OUT).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
BIN=$ROOT/.gpu/bin
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
do_build=0
only="tests compare decode bench sanitizer python dist scale"
default_test_filter='*cuda*:*Cuda*:*GpuSmoke*'
test_filter=$default_test_filter
sanitizer_filter='*GpuSmoke*'
sanitizer_shards=1
compare_args='--dtypes bf16 --dims 64,128 --modes fwd,fwdbwd'
decode_args=''
sweep_args='--dims 64,128 --seqlens 512,2048,8192 --iters 5 --warmup 1'
declare -A limit=([tests]=110 [compare]=100 [decode]=50 [bench]=50 [sanitizer]=60 [python]=50 [dist]=120 [scale]=120
  [gate]=150)
gate_shards=${GATE_SHARDS:-}
args="$*"
while (($#)); do
  case $1 in
    --build) do_build=1 ;;
    --tests) test_filter=$2; shift ;;
    --only) only=$2; shift ;;
    --limits) for kv in $2; do limit[${kv%%=*}]=${kv#*=}; done; shift ;;
    --compare-args) compare_args=$2; shift ;;
    --decode-args) decode_args=$2; shift ;;
    --sweep-args) sweep_args=$2; shift ;;
    --sanitizer-tests) sanitizer_filter=$2; shift ;;
    --sanitizer-shards) sanitizer_shards=$2; shift ;;
    --gate-shards) gate_shards=$2; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
STEPS=$OUT/steps.log
start=$(date +%s)
failures=()
wants() { [[ " $only " == *" $1 "* ]]; }

# step NAME LIMIT_S COMMAND...: runs a command, appending its output to $STEPS, records failures.
step() {
  local name=$1 lim=$2
  shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${lim}s): $*" >>"$STEPS"
  timeout "$lim" "$@" >>"$STEPS" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $(($(date +%s) - t0))s" >>"$STEPS"
  ((rc == 0)) || failures+=("$name")
  return $rc
}

if ((do_build)); then
  step build 900 bash -c "cmake -S . -B build-gpu -G Ninja -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90a \
      && cmake --build build-gpu -j \$(nproc) --target flashattn_tests flashattn-bench"
  mkdir -p "$BIN" && cp build-gpu/tests/cpp/flashattn_tests build-gpu/tools/bench/flashattn-bench "$BIN/"
elif [ -f "$ROOT/.gpu/bin.txz" ]; then
  mkdir -p "$BIN" && tar -xJf "$ROOT/.gpu/bin.txz" -C "$BIN"
fi
TESTS=$BIN/flashattn_tests
BENCH=$BIN/flashattn-bench
commit=$(cat "$BIN/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
device_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "device: $device_name; commit: $commit; date: $(date -u +%FT%TZ)" >>"$STEPS"

wheel=$(ls "$ROOT"/.gpu/wheels/flashattn-*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ] && { wants compare || wants decode || wants python || wants sm90 || wants gate; }; then
  python3 -m pip install -q --no-deps --no-index --target /tmp/fa-site "$wheel" >>"$STEPS" 2>&1 &&
    export PYTHONPATH=/tmp/fa-site:${PYTHONPATH:-}
fi

if wants tests; then
  step gpu-tests "${limit[tests]}" "$TESTS" --gtest_filter="$test_filter" --gtest_brief=1
  # On sm_90 the decode backend runs its multi-row calls on the warpgroup (wgmma) kernels: the same
  # tests once more on the mma.sync kernels that sm_80 runs.
  if [[ "$test_filter" == "*" || "$test_filter" == "$default_test_filter" || "$test_filter" == *ecode* ]]; then
    step gpu-tests-decode-mma "${limit[tests]}" env FLASHATTN_DECODE_WGMMA=0 "$TESTS" \
      --gtest_filter='CudaDecode*:*cuda_decode*' --gtest_brief=1
  fi
fi
if wants compare && [ -n "$wheel" ]; then
  step compare "${limit[compare]}" python3 bench/compare_torch.py --out "$OUT/compare_torch.json" \
    --plot-dir /tmp/plots $compare_args
  cp /tmp/plots/*.png "$OUT/" 2>/dev/null
fi
if wants decode && [ -n "$wheel" ]; then
  step decode "${limit[decode]}" python3 bench/decode_bench.py --out "$OUT/decode_bench.json" $decode_args
fi
if wants bench; then
  half=$((limit[bench] / 3))
  step bench-seed "$half" "$BENCH" --device cuda
  step bench-sweep "$((limit[bench] - half))" "$BENCH" --device cuda --sweep --mode fwd $sweep_args \
    --json "$OUT/bench_sweep.json"
fi
if wants sanitizer && ((sanitizer_shards > 1)); then
  echo "=== sanitizer: 4 tools x $sanitizer_shards shards in parallel (limit ${limit[sanitizer]}s each)" >>"$STEPS"
  sanitizer_logs=$OUT/sanitizer-logs
  mkdir -p "$sanitizer_logs"
  declare -A sanitizer_pid
  for tool in memcheck racecheck synccheck initcheck; do
    for ((shard = 0; shard < sanitizer_shards; shard++)); do
      OMP_NUM_THREADS=1 GTEST_TOTAL_SHARDS=$sanitizer_shards GTEST_SHARD_INDEX=$shard timeout "${limit[sanitizer]}" \
        compute-sanitizer --tool "$tool" --error-exitcode 99 "$TESTS" --gtest_filter="$sanitizer_filter" \
        --gtest_brief=1 >"$sanitizer_logs/sanitizer-$tool-$shard.log" 2>&1 &
      sanitizer_pid[$tool-$shard]=$!
    done
  done
  for key in "${!sanitizer_pid[@]}"; do
    wait "${sanitizer_pid[$key]}"
    rc=$?
    summary=$(grep -E '^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY' "$sanitizer_logs/sanitizer-$key.log" | tr '\n' ' ')
    echo "=== sanitizer-$key: rc=$rc; $summary" >>"$STEPS"
    ((rc == 0)) || failures+=("sanitizer-$key")
  done
  tar -czf "$OUT/sanitizer-logs.tgz" -C "$OUT" sanitizer-logs && rm -rf "$sanitizer_logs"
elif wants sanitizer; then
  quarter=$((limit[sanitizer] / 4))
  for tool in memcheck racecheck synccheck initcheck; do
    step "sanitizer-$tool" "$quarter" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$TESTS" --gtest_filter="$sanitizer_filter" --gtest_brief=1
  done
fi
if wants python && [ -n "$wheel" ]; then
  step python-tests "${limit[python]}" python3 -m pytest -q -p no:cacheprovider tests/python/test_torch_attention.py \
    tests/python/test_torch_kvcache.py tests/python/test_torch_transformers.py tests/python/test_torch_distributed.py
fi
if wants dist; then
  # Open MPI refuses root and more ranks than cores unless told; one OpenMP thread per rank.
  mpi_env=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    OMP_NUM_THREADS=1)
  third=$((limit[dist] / 3))
  step dist-tests "$third" "$TESTS" --gtest_brief=1 \
    --gtest_filter='*CudaDeviceOps*:*RingOfOneCuda*:*LocalCommunicatorCuda*:*NcclCommunicator*:*RingNccl*'
  for prog in flashattn_dist_mpi_cuda_tests flashattn_dist_mpi_cuda_ring_tests; do
    [ -x "$BIN/$prog" ] && step "dist-$prog" "$((third / 2))" "${mpi_env[@]}" mpirun -np 2 "$BIN/$prog"
  done
  [ -x "$BIN/ring_overhead" ] && step dist-ring-overhead "$third" "$BIN/ring_overhead"
fi
if wants sm90; then
  # Correctness first (a failure there makes the timings moot, but they still run: a wrong result is
  # flagged by compare_torch's own check), then the sanitizers, the SASS, the timings.
  sm90_filter='*cuda_sm90*:CudaSm90*'
  step sm90-tests 100 "$TESTS" --gtest_filter="$sm90_filter" --gtest_brief=1
  step sm90-tests-no-pingpong 60 env FLASHATTN_SM90_PINGPONG=0 "$TESTS" --gtest_filter='CudaSm90.*' --gtest_brief=1
  step sm90-tests-no-overlap 60 env FLASHATTN_SM90_OVERLAP=0 "$TESTS" --gtest_filter='CudaSm90.*' --gtest_brief=1
  # The persistent grid runs unmasked dense calls by default; forced on, it runs every call (causal, varlen,
  # paged), and forced off none.
  step sm90-tests-persistent 60 env FLASHATTN_SM90_PERSISTENT=1 "$TESTS" --gtest_filter="$sm90_filter" --gtest_brief=1
  # Paged K/V copied as rows at every page size (by default only where no TMA box exists), also under the
  # dynamic draw (its producer warpgroup then reads each draw from shared memory); memcheck and racecheck.
  paged_test='CudaSm90.PagedVarlenAtPageAndTileBoundaries'
  step sm90-tests-paged-rows 60 env FLASHATTN_SM90_PAGED_ROWS=1 "$TESTS" --gtest_filter="$paged_test" --gtest_brief=1
  for tool in memcheck racecheck; do
    step "sm90-$tool-paged-rows" 120 env FLASHATTN_SM90_PAGED_ROWS=1 FLASHATTN_SM90_PERSISTENT=1 FLASHATTN_SM90_DYNAMIC=1 \
      compute-sanitizer --tool "$tool" --error-exitcode 99 "$TESTS" --gtest_filter="$paged_test" --gtest_brief=1
  done
  step sm90-tests-no-persistent 60 env FLASHATTN_SM90_PERSISTENT=0 "$TESTS" --gtest_filter='CudaSm90.*' --gtest_brief=1
  # The dynamic tile draw on every persistent call (varlen and unmasked ones included), and the epilogue's
  # TMA store (opt-in until measured).
  step sm90-tests-dynamic 60 env FLASHATTN_SM90_PERSISTENT=1 FLASHATTN_SM90_DYNAMIC=1 "$TESTS" \
    --gtest_filter="$sm90_filter" --gtest_brief=1
  step sm90-tests-tma-store 100 env FLASHATTN_SM90_TMA_STORE=1 "$TESTS" --gtest_filter="$sm90_filter" --gtest_brief=1
  # The backward's dQ modes: the bulk reductions (default) under memcheck / racecheck on its boundary and
  # varlen tests, and the per-thread reductions (the A/B arm) over the backward catalogue forced on cuda_sm90.
  step sm90-tests-bwd-reductions 100 env FLASHATTN_SM90_BWD_DQ_BULK=0 "$TESTS" \
    --gtest_filter='*BackendBackward*cuda_sm90*:CudaSm90.Backward*:*Scale*cuda_sm90*' --gtest_brief=1
  for tool in memcheck racecheck; do
    step "sm90-$tool-bwd" 120 compute-sanitizer --tool "$tool" --error-exitcode 99 "$TESTS" \
      --gtest_filter='CudaSm90.BackwardAtTileAndStepBoundaries:CudaSm90.BackwardVarlenWindowAndGqa' --gtest_brief=1
  done
  # The native FP8 forward (opt-in until it beats cuda_fp8): the FP8 tests force every backend, cuda_sm90 included;
  # memcheck on them too.
  step sm90-tests-fp8 60 env FLASHATTN_SM90_FP8=1 "$TESTS" --gtest_filter='Fp8Forward*' --gtest_brief=1
  step sm90-tests-fp8-no-pingpong 60 env FLASHATTN_SM90_FP8=1 FLASHATTN_SM90_PINGPONG=0 "$TESTS" \
    --gtest_filter='Fp8Forward*' --gtest_brief=1
  step sm90-memcheck-fp8 90 compute-sanitizer --tool memcheck --error-exitcode 99 "$TESTS" \
    --gtest_filter='Fp8Forward*' --gtest_brief=1
  for tool in racecheck synccheck; do  # the V^T transposers and the consumers' turns
    step "sm90-$tool-fp8" 90 compute-sanitizer --tool "$tool" --error-exitcode 99 "$TESTS" \
      --gtest_filter='Fp8ForwardSm90.*' --gtest_brief=1
  done
  # SM90_SANITIZERS / SM90_COMPARE_ARGS trim the run when little device time is left.
  for tool in ${SM90_SANITIZERS:-memcheck racecheck synccheck}; do
    for ov in 0 1; do
      # The second pass also draws tiles dynamically everywhere and stores O with TMA.
      step "sm90-sanitizer-$tool-overlap$ov" 50 env FLASHATTN_SM90_OVERLAP=$ov FLASHATTN_SM90_TMA_STORE=$ov \
        FLASHATTN_SM90_PERSISTENT=$ov FLASHATTN_SM90_DYNAMIC=$ov compute-sanitizer --tool "$tool" \
        --error-exitcode 99 "$TESTS" \
        --gtest_filter='CudaSm90.ForwardAtTileAndStageBoundaries:CudaSm90.VarlenAndScoreModsAtSequenceEdges:CudaSm90.SeveralWorkTilesPerCta' --gtest_brief=1
    done
  done
  step sm90-sass 60 scripts/sass-check.sh "$TESTS"
  step sm90-sass-fp8 60 scripts/sass-check.sh "$TESTS" fp8_fwd_kernel 32  # its softmax between the waits
  [ -n "$wheel" ] && step sm90-compare 100 python3 bench/compare_torch.py \
    --out "$OUT/compare_torch_sm90.json" --plot-dir /tmp/plots-sm90 --modes fwd \
    --impls flashattn,flashattn_sm80,sdpa_flash,sdpa_cudnn ${SM90_COMPARE_ARGS:---dims 64,128,256 --dtypes bf16,fp16 --rounds 3 --rep 60}
  cp /tmp/plots-sm90/*.png "$OUT/" 2>/dev/null
  # The A/B of the ping-pong and the intra-warpgroup overlap (both on by default; the overlap only in the 64
  # bucket): the same sweep with each combination, and the defaults with the epilogue's TMA store.
  for variant in "1 0 0" "0 0 0" "1 1 0" "0 1 0" "1 1 1"; do
    read -r pp ov ts <<<"$variant"
    step "sm90-bench-pp$pp-ov$ov-ts$ts" 90 env FLASHATTN_SM90_PINGPONG=$pp FLASHATTN_SM90_OVERLAP=$ov \
      FLASHATTN_SM90_TMA_STORE=$ts "$BENCH" --device cuda \
      --impl cuda_sm90,cuda_sm80 --sweep --mode fwd --dims 64,128,256 --seqlens 512,2048,8192 --iters 5 --warmup 1 \
      --json "$OUT/bench_sm90_pp${pp}_ov${ov}_ts$ts.json"
  done
fi
if wants gate; then
  # flash-attn's test file (issue 37), shards GATE_SHARDS of 64 (--gate-shards), 3 pytest-xdist workers each
  # (more run some cases out of memory on 80 GB); a shard's failures run again alone (--ids), and the step
  # fails only if one fails again. Needs tests/compat/.upstream carried along.
  for shard in $gate_shards; do
    step "gate-$shard" "${limit[gate]}" python3 tests/compat/run_flash_attn_tests.py --no-fetch --shard "$shard/64" \
      -- -n 3
    failed=/tmp/gate-$shard-failed.txt
    sed -n '/^=== gate-'"$shard"' (limit/,$p' "$STEPS" | grep -E '^FAILED' | sed -E 's/^FAILED [^:]*:://; s/ - .*//' >"$failed"
    if [ -s "$failed" ]; then
      keep=()
      for f in "${failures[@]}"; do [ "$f" != "gate-$shard" ] && keep+=("$f"); done
      failures=("${keep[@]}")
      step "gate-$shard-again" "${limit[gate]}" python3 tests/compat/run_flash_attn_tests.py --no-fetch --ids "$failed" -- -n 1
    fi
    rm -f "$failed"
  done
fi
if wants scale; then
  step gpu-scale "${limit[scale]}" "$TESTS" --gtest_filter='GpuScale.*'
fi

{
  echo "# gpu-check summary"
  echo
  echo "- device: $device_name"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $commit"
  echo "- command: scripts/gpu-check.sh $args"
  echo "- wall time: $(($(date +%s) - start)) s"
  echo "- failed steps: ${failures[*]:-none}"
} >"$OUT/summary.md"
echo "gpu-check: done in $(($(date +%s) - start)) s; failed: ${failures[*]:-none}"
((${#failures[@]} == 0))
