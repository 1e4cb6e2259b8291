#!/bin/bash
# Session 12: where batch-1 decode spends its time. Per-block timeline (instrumented wheel: clock64 stamps,
# printf), and Nsight Compute kernel durations with the regular wheel.
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT
T=/tmp/fa-trace; S=/tmp/fa-site
python3 -m pip install -q --no-deps --no-index --target $T .gpu/wheels-trace/flashattn-*.whl > $OUT/tl.log 2>&1
python3 -m pip install -q --no-deps --no-index --target $S .gpu/wheels/flashattn-*.whl >> $OUT/tl.log 2>&1
for cfg in "1 4096 1 0" "1 4096 1 32" "1 4096 1 8" "1 32768 1 0" "16 4096 1 0" "1 4096 16 0"; do
  f=$OUT/tl-$(echo $cfg | tr ' ' '_').txt
  PYTHONPATH=$T timeout 60 python3 .gpu/timeline.py $cfg > $f 2>>$OUT/tl.log
done
python3 .gpu/timeline.py --parse $OUT/tl-*.txt > $OUT/timeline.txt 2>&1
cat $OUT/timeline.txt
PYTHONPATH=$S timeout 150 bash bench/decode_profile.sh $OUT > $OUT/ncu.txt 2>&1
tail -30 $OUT/ncu.txt
