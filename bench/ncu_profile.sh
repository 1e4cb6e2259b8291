#!/usr/bin/env bash
# Nsight Compute profile of cuda_sm80's main kernels next to FlashAttention-2's (PyTorch SDPA's flash
# backend) on the same problem, one launch each: speed of light, warp stall reasons, scheduler issue
# rate, occupancy. For the "where do the cycles go" question of docs/kernels.md. Run on the GPU machine
# after scripts/stage-gpu.sh (needs .gpu/bin.tgz and PyTorch).
# Usage: OUT=dir bench/ncu_profile.sh   (writes $OUT/ncu_<name>.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-ncu-out}
mkdir -p "$OUT" .gpu/bin
[ -x .gpu/bin/flashattn-bench ] || tar -xzf .gpu/bin.tgz -C .gpu/bin
SECTIONS=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy
  --section LaunchStats --section ComputeWorkloadAnalysis)

profile() {  # NAME KERNEL_REGEX COMMAND...
  local name=$1 regex=$2
  shift 2
  timeout 120 ncu --clock-control none "${SECTIONS[@]}" -k "regex:$regex" -c 1 "$@" >"$OUT/ncu_$name.txt" 2>&1
  echo "ncu_profile: $name rc=$?"
}

# FlashAttention's benchmark convention at S = 2048: H = 2048 / D, B = 16384 / S = 8.
bench=(.gpu/bin/flashattn-bench --device cuda --impl cuda_sm80 --batch 8 --seqlen 2048 --dtype bf16 --no-check
  --iters 1 --warmup 0)
profile ours_bwd_d64 bwd_tiled_kernel "${bench[@]}" --mode bwd --heads 32 --dim 64
profile ours_fwd_d128 fwd_kernel "${bench[@]}" --mode fwd --heads 16 --dim 128

# The same problems through SDPA's flash backend (B, H, S, D layout), argv: head_dim, fwd|bwd.
sdpa="$OUT/sdpa_flash_call.py"
printf '%s\n' \
  'import sys, torch' \
  'from torch.nn.attention import SDPBackend, sdpa_kernel' \
  'd, mode = int(sys.argv[1]), sys.argv[2]' \
  'q, k, v = (torch.randn(8, 2048 // d, 2048, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))' \
  'with sdpa_kernel(SDPBackend.FLASH_ATTENTION):' \
  '    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)' \
  '    if mode == "bwd":' \
  '        out.backward(torch.randn_like(out))' \
  'torch.cuda.synchronize()' >"$sdpa"
profile fa2_bwd_d64 flash_bwd_dq_dk_dv python3 "$sdpa" 64 bwd
profile fa2_fwd_d128 flash_fwd_kernel python3 "$sdpa" 128 fwd
