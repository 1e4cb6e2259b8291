#!/bin/bash
# Session 12, decode v13 (test fixes: an arena allocator in the capture test, DeviceCall passing
# num_splits). Decode tests both ways, sanitizers on the graph/allocator tests, the default decode subset
# with the peers (CUDA graphs).
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT
scripts/gpu-check.sh --only "tests decode" --limits "tests=150 decode=110" \
  --tests '*cuda_decode*:CudaDecode*:*KVCache*:*Kvcache*' --decode-args "--graph"
cp $OUT/steps.log $OUT/steps-tests.log
scripts/gpu-check.sh --only "sanitizer" --limits "sanitizer=100" --sanitizer-tests 'CudaDecode.EveryKernelShape:CudaDecode.GraphCaptureReplayMatchesDirectCall:CudaDecode.CallerWorkspaceAllocator:CudaDecode.SplitCombineIsRepeatable' --sanitizer-shards 2
cp $OUT/steps.log $OUT/steps-sanitizer.log
tar -czf $OUT/logs.tgz -C $OUT steps-tests.log steps-sanitizer.log sanitizer-logs.tgz 2>/dev/null
grep -E "rc=|FAILED|PASSED" $OUT/steps-tests.log | head
grep -E "rc=|SUMMARY" $OUT/steps-sanitizer.log | head -10
grep -A40 "K+V read bandwidth" $OUT/steps-tests.log | head -36
rm -f $OUT/steps.log $OUT/summary.md $OUT/steps-tests.log $OUT/steps-sanitizer.log $OUT/sanitizer-logs.tgz
