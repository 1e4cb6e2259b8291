#pragma once

// Volta's tensor-core instruction, mma.sync.aligned.m8n8k4 with f16 inputs and f32 accumulators, in the two
// operand layouts the sm70 kernels use (mma884_layout.h says which elements each lane passes and gets).
// Valid PTX on sm_70 and every later architecture, so the kernels built for sm_80/sm_90 run the same code.

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/sm70/mma884_layout.h"

namespace flashattn::detail::cuda::sm70 {

// Four f16 of a lane's A or B operand: two f16x2 registers, the lower-indexed element in the low half.
struct Half4 {
  uint32_t lo, hi;
};

// c += A B with A row-major and B col-major (S = Q K^T: B's columns are K's rows).
__device__ __forceinline__ void mma884_row_col(float (&c)[8], Half4 a, Half4 b) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9}, {%10, %11}, "
      "{%0, %1, %2, %3, %4, %5, %6, %7};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]), "+f"(c[7])
      : "r"(a.lo), "r"(a.hi), "r"(b.lo), "r"(b.hi));
}

// c += A B with A and B row-major (O = P V: B's rows are V's rows).
__device__ __forceinline__ void mma884_row_row(float (&c)[8], Half4 a, Half4 b) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9}, {%10, %11}, "
      "{%0, %1, %2, %3, %4, %5, %6, %7};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]), "+f"(c[7])
      : "r"(a.lo), "r"(a.hi), "r"(b.lo), "r"(b.hi));
}

// The 4 consecutive halves at `p` (8-byte aligned) of shared memory.
__device__ __forceinline__ Half4 load_half4(const void* p) {
  const uint2 v = *static_cast<const uint2*>(p);
  return Half4{v.x, v.y};
}

template <int kGroups>
__device__ __forceinline__ void zero_acc(float (&acc)[kGroups][8]) {
#pragma unroll
  for (int g = 0; g < kGroups; ++g)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
}

// acc[g] += A B^T, the product of the warp's 16 rows of A (this lane's A row starts at a_lane: a_row(lane)
// of the warp's tile) with rows 16 g .. 16 g + 15 of B (a shared tile of pitch kPitch), over kSteps k4
// steps: S = Q K^T, S^T = K Q^T, dP = dO V^T. Both operands are row-major in shared memory (B col-major
// for the instruction).
template <int kGroups, int kSteps, int kPitch>
__device__ __forceinline__ void mma_a_bt(float (&acc)[kGroups][8], const __half* a_lane, const __half* b_tile,
                                         int lane) {
  const __half* b_lane = b_tile + b_col(lane) * kPitch;
#pragma unroll 4
  for (int kk = 0; kk < kSteps; ++kk) {
    const Half4 a = load_half4(a_lane + 4 * kk);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) mma884_row_col(acc[g], a, load_half4(b_lane + 16 * g * kPitch + 4 * kk));
  }
}

// acc[g] += A B, the warp's 16 rows of A (this lane's row at a_lane) times columns 16 g .. 16 g + 15 of B
// (rows over k, a shared tile of pitch kPitch), over kSteps k4 steps: O += P V, dV += P^T dO, dK += dS^T Q,
// dQ += dS K. a_op(kk, a) may change this lane's A operand of step kk first (the forward's dropout).
template <int kGroups, int kSteps, int kPitch, typename AOp>
__device__ __forceinline__ void mma_a_b(float (&acc)[kGroups][8], const __half* a_lane, const __half* b_tile, int lane,
                                        AOp&& a_op) {
  const __half* b_lane = b_tile + b_row_k(lane) * kPitch + b_row_col0(lane);
#pragma unroll 2
  for (int kk = 0; kk < kSteps; ++kk) {
    Half4 a = load_half4(a_lane + 4 * kk);
    a_op(kk, a);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) mma884_row_row(acc[g], a, load_half4(b_lane + 4 * kk * kPitch + 16 * g));
  }
}
template <int kGroups, int kSteps, int kPitch>
__device__ __forceinline__ void mma_a_b(float (&acc)[kGroups][8], const __half* a_lane, const __half* b_tile,
                                        int lane) {
  mma_a_b<kGroups, kSteps, kPitch>(acc, a_lane, b_tile, lane, [](int, Half4&) {});
}

// Writes a warp's 16 x (16 kGroups) f32 accumulators acc[g][i] (column group g; mma884_layout.h) as f16 into
// a row-major shared buffer of pitch kPitch halves, where they are read back as A operands: a lane's
// accumulators and its A operand cover different elements. Accumulators i, i + 1 (i even) are adjacent
// columns of one row: one 4-byte store each.
template <int kGroups, int kPitch>
__device__ __forceinline__ void stage_acc(__half* buf, const float (&acc)[kGroups][8], int lane) {
#pragma unroll
  for (int g = 0; g < kGroups; ++g)
#pragma unroll
    for (int i = 0; i < 8; i += 2)
      *reinterpret_cast<__half2*>(buf + c_row(lane, i) * kPitch + 16 * g + c_col(lane, i)) =
          __floats2half2_rn(acc[g][i], acc[g][i + 1]);
}

}  // namespace flashattn::detail::cuda::sm70
