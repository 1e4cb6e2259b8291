#!/usr/bin/env bash
# Nsight Compute view of the decode kernels at the latency-bound shapes (batch 1): per kernel launch its
# duration, grid, DRAM bytes read and achieved occupancy, to split a call's time between the attention
# kernel, the split combine and the gaps between them. Runs on the GPU machine (ncu, torch, the wheel):
#   bench/decode_profile.sh [OUT_DIR]      # writes decode_profile.csv there (default $OUT or .)
set -euo pipefail
out=${1:-${OUT:-.}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
ncu --clock-control none --target-processes all --kernel-name regex:'decode|combine|append|rotary' --launch-count 24 --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active \
  python3 bench/decode_bench.py --dims 128 --ratios 32/8 --batches 1 --contexts 4096 32768 --sq 1 --pages 0 \
  --no-peers --rep-ms 1 --out /tmp/decode_profile_bench.json >"$out/decode_profile.csv"
python3 - "$out/decode_profile.csv" <<'PY'
import csv, sys
rows = {}
lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
for r in csv.DictReader(lines[start:]):
    rows.setdefault(r["ID"], {"kernel": r["Kernel Name"][:60]})[r["Metric Name"]] = r["Metric Value"] + " " + r["Metric Unit"]
for i, r in sorted(rows.items(), key=lambda x: int(x[0])):
    print(i, r.pop("kernel"), "|", "; ".join(f"{k}={v}" for k, v in sorted(r.items())))
PY
