#!/bin/bash
# Session 12, decode v13: the combine kernel launched early (PDL) for every split call (no in-kernel
# combine, no counters to reset), its loads in one round trip, and the Python package's workspace from
# torch's caching allocator. Tests (wgmma both ways), sanitizers, A/B against HEAD's wheel.
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT
scripts/gpu-check.sh --only "tests" --limits "tests=150" --tests '*cuda_decode*:CudaDecode*:*KVCache*:*Kvcache*'
cp $OUT/steps.log $OUT/steps-tests.log
scripts/gpu-check.sh --only "sanitizer" --limits "sanitizer=100" --sanitizer-tests 'CudaDecode.EveryKernelShape:CudaDecode.GraphCaptureReplayMatchesDirectCall:CudaDecode.CallerWorkspaceAllocator' --sanitizer-shards 2
cp $OUT/steps.log $OUT/steps-sanitizer.log
grep -E "rc=|FAILED|PASSED" $OUT/steps-tests.log | head
grep -E "rc=|SUMMARY" $OUT/steps-sanitizer.log | head -10
O=/tmp/fa-old; N=/tmp/fa-site
python3 -m pip install -q --no-deps --no-index --target $O .gpu/wheels-old/flashattn-*.whl > $OUT/ab.log 2>&1
python3 -m pip install -q --no-deps --no-index --target $N .gpu/wheels/flashattn-*.whl >> $OUT/ab.log 2>&1
PYTHONPATH=$N timeout 90 python3 -m pytest -q tests/python/test_torch_kvcache.py tests/python/test_numpy_kvcache.py 2>&1 | tail -3 >> $OUT/ab.log
A="--graph --dims 128 --ratios 32/8 --batches 1 16 --contexts 4096 32768 --sq 1 8 16 --pages 0"
timeout 170 python3 bench/ab_decode.py --arms old=$O new=$N --rounds 3 --out $OUT/ab-main.json -- $A >> $OUT/ab.log 2>&1; echo "ab-main rc=$?" >> $OUT/ab.log
B="--graph --dims 128 --ratios 64/8 --batches 1 16 --contexts 4096 --sq 1 8 --pages 0 16"
timeout 110 python3 bench/ab_decode.py --arms old=$O new=$N --rounds 3 --out $OUT/ab-gqa8-paged.json -- $B >> $OUT/ab.log 2>&1; echo "ab-b rc=$?" >> $OUT/ab.log
C="--graph --dims 64 256 --ratios 32/8 --batches 1 16 --contexts 4096 --sq 1 --pages 0"
timeout 70 python3 bench/ab_decode.py --arms old=$O new=$N --rounds 3 --out $OUT/ab-d64-d256.json -- $C >> $OUT/ab.log 2>&1; echo "ab-c rc=$?" >> $OUT/ab.log
tar -czf $OUT/logs.tgz -C $OUT steps-tests.log steps-sanitizer.log sanitizer-logs.tgz 2>/dev/null
grep -E "rc=|^D|passed|failed|rror" $OUT/ab.log | head -60
rm -f $OUT/steps.log $OUT/summary.md $OUT/steps-tests.log $OUT/steps-sanitizer.log $OUT/sanitizer-logs.tgz
