#!/bin/bash
# Session 12: what the ~2 us of the counter reset + workspace costs at batch 1. Arms (experiment build):
# new (combine in one round trip), persist (no reset kernel, no workspace allocation), noreset (no reset
# kernel; per-call workspace), noalloc (persistent workspace; reset kernel), combinek (no counters: combine
# kernel launched with PDL), combinek+noalloc.
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT
O=/tmp/fa-old; N=/tmp/fa-new
python3 -m pip install -q --no-deps --no-index --target $O .gpu/wheels/flashattn-*.whl > $OUT/ab.log 2>&1
python3 -m pip install -q --no-deps --no-index --target $N .gpu/wheels-exp/flashattn-*.whl >> $OUT/ab.log 2>&1
for arm in "$N FLASHATTN_DECODE_EXP_NORESET=1" "$N FLASHATTN_DECODE_EXP_COMBINEK=1"; do
  set -- $arm
  echo "check $arm: $(env PYTHONPATH=$1 $2 timeout 60 python3 .gpu/check_arms.py 2>&1 | tail -3)" >> $OUT/ab.log
done
grep check $OUT/ab.log
DEC="--graph --dims 128 --ratios 32/8 64/8 --batches 1 4 --contexts 4096 32768 --sq 1 --pages 0"
timeout 450 python3 bench/ab_decode.py --arms old=$O new=$N persist=$N,FLASHATTN_DECODE_EXP_PERSIST=1 \
  noreset=$N,FLASHATTN_DECODE_EXP_NORESET=1 noalloc=$N,FLASHATTN_DECODE_EXP_NOALLOC=1 \
  combinek=$N,FLASHATTN_DECODE_EXP_COMBINEK=1 ck_noalloc=$N,FLASHATTN_DECODE_EXP_COMBINEK=1,FLASHATTN_DECODE_EXP_NOALLOC=1 \
  --rounds 3 --out $OUT/ab-reset.json -- $DEC >> $OUT/ab.log 2>&1; echo "ab rc=$?" >> $OUT/ab.log
grep -E "rc=|^D|Error|error" $OUT/ab.log | head -60
