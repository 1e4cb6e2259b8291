#!/bin/bash
# Session 12: v13's serving step (decode_bench --append: each call of ours appends its token; peers' figures
# are their attention alone), default subset, CUDA graphs.
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT
S=/tmp/fa-site
python3 -m pip install -q --no-deps --no-index --target $S .gpu/wheels/flashattn-*.whl > $OUT/append.log 2>&1
PYTHONPATH=$S timeout 200 python3 bench/decode_bench.py --graph --append --out $OUT/decode-append-graph.json >> $OUT/append.log 2>&1
echo "rc=$?" >> $OUT/append.log
grep -A40 "K+V read bandwidth" $OUT/append.log | head -36; tail -2 $OUT/append.log
