#!/bin/bash
# Session 12: batch-1 decode. Arms: old (HEAD's wheel), new (combine in one round trip), persist (+ no
# counter reset kernel, no workspace allocation: self-resetting counters in a persistent buffer; experiment),
# deep (+ 6 stages at D 128 for the streaming small shape; experiment). Correctness per arm, then A/B.
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT
O=/tmp/fa-old; N=/tmp/fa-new
python3 -m pip install -q --no-deps --no-index --target $O .gpu/wheels/flashattn-*.whl > $OUT/ab.log 2>&1
python3 -m pip install -q --no-deps --no-index --target $N .gpu/wheels-exp/flashattn-*.whl >> $OUT/ab.log 2>&1
for arm in "$O" "$N" "$N FLASHATTN_DECODE_EXP_PERSIST=1" "$N FLASHATTN_DECODE_EXP_DEEP=1"; do
  set -- $arm
  echo "check $arm: $(env PYTHONPATH=$1 $2 timeout 60 python3 .gpu/check_arms.py 2>&1 | tail -3)" >> $OUT/ab.log
done
grep check $OUT/ab.log
DEC="--graph --dims 128 --ratios 32/8 --batches 1 4 16 64 --contexts 4096 32768 --sq 1 --pages 0"
timeout 330 python3 bench/ab_decode.py --arms old=$O new=$N persist=$N,FLASHATTN_DECODE_EXP_PERSIST=1 \
  deep=$N,FLASHATTN_DECODE_EXP_DEEP=1 both=$N,FLASHATTN_DECODE_EXP_PERSIST=1,FLASHATTN_DECODE_EXP_DEEP=1 --rounds 3 \
  --out $OUT/ab-b1.json -- $DEC >> $OUT/ab.log 2>&1; echo "ab rc=$?" >> $OUT/ab.log
DEC2="--graph --dims 64 256 --ratios 32/8 --batches 1 16 --contexts 4096 32768 --sq 1 --pages 0"
timeout 170 python3 bench/ab_decode.py --arms old=$O new=$N deep=$N,FLASHATTN_DECODE_EXP_DEEP=1 --rounds 3 \
  --out $OUT/ab-d64-d256.json -- $DEC2 >> $OUT/ab.log 2>&1; echo "ab2 rc=$?" >> $OUT/ab.log
grep -E "rc=|^D|Error|error" $OUT/ab.log | head -60
