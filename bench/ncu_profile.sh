#!/usr/bin/env bash
# Nsight Compute profile of cuda_sm80's main kernels next to FlashAttention-2's (PyTorch SDPA's flash
# backend) on the same problem, one launch each: speed of light, warp stall reasons, scheduler issue
# rate, occupancy, instruction mix. For the "where do the cycles go" question of docs/kernels.md. Runs on
# the GPU machine after scripts/stage-gpu.sh (needs .gpu/bin.txz and PyTorch).
#
# Usage: OUT=dir [BENCH=path] [TAG=name] bench/ncu_profile.sh [MODE:DIM[:SEQLEN[:causal]] ...]
#   (default: bwd:64 fwd:128). MODE is fwd or bwd, DIM the head dim, SEQLEN the sequence length (bf16,
#   H = 2048 / DIM; default S = 2048 with B = 8, else FlashAttention's convention B = 16384 / S), "causal"
#   the causal mask. BENCH: the flashattn-bench to profile (default .gpu/bin's); TAG: appended to our
#   profiles' names, to profile two builds or settings of ours beside one FA2 profile (FA2's is skipped
#   when it exists). Writes $OUT/ncu_{ours[TAG],fa2}_MODE_dDIM[_sSEQLEN][_causal].txt; with NCU_SOURCE=1
#   also the whole section set and the
#   per-SASS-instruction table (executed instructions, stall samples) as $OUT/ncu_*_source.csv.gz, to line
#   up the two kernels' instruction mix and hot spots. IMPL (default cuda_sm80) profiles another backend of
#   ours (cuda_sm90: its kernels bwd_kernel / fwd_kernel, function names matched exactly); NO_PEER=1 skips
#   FA2's profile.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-ncu-out}
mkdir -p "$OUT" .gpu/bin
BENCH=${BENCH:-.gpu/bin/flashattn-bench}
[ -x "$BENCH" ] || tar -xJf .gpu/bin.txz -C .gpu/bin
problems=("$@")
((${#problems[@]})) || problems=(bwd:64 fwd:128)
if [ "${NCU_SOURCE:-0}" = 1 ]; then
  SECTIONS=(--set full --import-source no)
else
  SECTIONS=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy
    --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats)
fi

profile() {  # NAME KERNEL_REGEX COMMAND...
  local name=$1 regex=$2
  shift 2
  timeout 180 ncu --clock-control none "${SECTIONS[@]}" -k "regex:$regex" -c 1 -f -o "$OUT/$name" "$@" >"$OUT/ncu_$name.log" 2>&1
  echo "ncu_profile: $name rc=$?"
  ncu -i "$OUT/$name.ncu-rep" --page details >"$OUT/ncu_$name.txt" 2>&1
  if [ "${NCU_SOURCE:-0}" = 1 ]; then
    ncu -i "$OUT/$name.ncu-rep" --page source --print-source sass --csv 2>&1 | gzip >"$OUT/ncu_${name}_source.csv.gz"
  fi
  rm -f "$OUT/$name.ncu-rep"
}

# The same problem through SDPA's flash backend (B, H, S, D layout), argv: head_dim, fwd|bwd.
sdpa="$OUT/sdpa_flash_call.py"
printf '%s\n' \
  'import sys, torch' \
  'from torch.nn.attention import SDPBackend, sdpa_kernel' \
  'd, mode, s, b, causal = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"' \
  'q, k, v = (torch.randn(b, 2048 // d, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))' \
  'with sdpa_kernel(SDPBackend.FLASH_ATTENTION):' \
  '    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)' \
  '    if mode == "bwd":' \
  '        out.backward(torch.randn_like(out))' \
  'torch.cuda.synchronize()' >"$sdpa"

for problem in "${problems[@]}"; do
  IFS=: read -r mode dim seqlen mask <<<"$problem"
  seqlen=${seqlen:-2048}
  batch=$((seqlen == 2048 ? 8 : 16384 / seqlen))
  name="${mode}_d$dim"
  [ "$seqlen" = 2048 ] || name="${name}_s$seqlen"
  causal=()
  if [ "${mask:-}" = causal ]; then name="${name}_causal" causal=(--causal); fi
  if [ "$mode" = bwd ]; then ours=bwd_tiled_kernel fa2=flash_bwd_dq_dk_dv; else ours=fwd_kernel fa2=flash_fwd_kernel; fi
  [ "${IMPL:-cuda_sm80}" = cuda_sm90 ] && ours="^${mode}_kernel\$"
  profile "ours${TAG:-}_$name" "$ours" "$BENCH" --device cuda --impl "${IMPL:-cuda_sm80}" --batch "$batch" \
    --seqlen "$seqlen" --dtype bf16 --no-check --iters 1 --warmup 0 --mode "$mode" --heads $((2048 / dim)) --dim "$dim" \
    "${causal[@]}"
  [ "${NO_PEER:-0}" = 1 ] || [ -f "$OUT/ncu_fa2_$name.txt" ] ||
    profile "fa2_$name" "$fa2" python3 "$sdpa" "$dim" "$mode" "$seqlen" "$batch" "$((${#causal[@]} > 0))"
done
