#!/usr/bin/env bash
# The CPU benchmark of the foundation issue: cpu_flash forward on llama.cpp's (ggml) reference shapes,
# forward and backward at B=1 H=16 S=4096 D=128 (causal and not), and peak RSS at S = 16k and 64k
# (memory must stay O(S)). Writes a markdown table with machine, date, commit and commands.
# Usage: bench/cpu_bench.sh [BUILD_DIR] > bench/results/<date>-cpu.md
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BENCH=$BUILD/tools/bench/flashattn-bench
THREADS=$(nproc)

echo "# cpu_flash on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($THREADS threads)"
echo
echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit: $(git rev-parse --short HEAD); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- FLOPs count the two matmuls, 4*B*H*Sq*Sk*D (halved when causal); backward counts 2.5x forward."
echo "- all rows passed the all-close check against the fp64 reference unless marked otherwise"
echo

run() {
  local title=$1
  shift
  echo "## $title"
  echo
  echo "\`flashattn-bench $*\`"
  echo
  echo '```'
  "$BENCH" "$@" --threads "$THREADS" | sed -n '/^==/,$p'
  echo '```'
  echo
}

run "ggml prefill shape (D=128, 8 heads, 512 queries x 4096 keys, f16)" \
  --impl cpu_flash --batch 1 --heads 8 --seqlen-q 512 --seqlen-k 4096 --dim 128 --dtype f16 --iters 5
run "ggml decode shape (1 query x 4096 keys)" \
  --impl cpu_flash --batch 1 --heads 8 --seqlen-q 1 --seqlen-k 4096 --dim 128 --dtype f16 --iters 300
for mode in fwd bwd; do
  for causal in "" --causal; do
    run "B=1 H=16 S=4096 D=128 bf16 $mode ${causal:-full}" \
      --impl cpu_flash --batch 1 --heads 16 --seqlen 4096 --dim 128 --dtype bf16 --mode $mode $causal --iters 3
  done
done

echo "## Peak resident memory (forward, H=1, D=128, bf16, no check)"
echo
echo "| seqlen | q+k+v+out bytes | peak RSS | time (s) |"
echo "|---|---|---|---|"
for s in 16384 65536; do
  log=$(mktemp)
  /usr/bin/time -v "$BENCH" --impl cpu_flash --batch 1 --heads 1 --seqlen $s --dim 128 --dtype bf16 \
    --no-check --iters 1 --warmup 0 --threads "$THREADS" >"$log" 2>&1
  rss=$(grep "Maximum resident" "$log" | awk '{print $NF}')
  secs=$(grep "Elapsed (wall" "$log" | awk '{print $NF}')
  echo "| $s | $((4 * s * 128 * 2 / 1024 / 1024)) MiB | $((rss / 1024)) MiB | $secs |"
  rm -f "$log"
done
