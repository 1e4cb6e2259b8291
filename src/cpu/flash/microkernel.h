#pragma once

// The one GEMM of cpu_flash: C (M x N) op= A (M x K) * B (K x N) in fp32, register-blocked.
//
// Every fp32 tile is a *strip tile*: columns are grouped in strips of 16 (one vector), and element
// (r, c) of a tile with strip stride ss lives at  t + (c / 16) * ss + r * 16 + c % 16.
// B and C are strip tiles; N is given in strips. A is read one scalar at a time (broadcast), either
//   ALayout::rows:        A itself is a strip tile with M rows: A(r, k) at a + (k/16) * ss + r*16 + k%16
//   ALayout::transposed:  A^T is a strip tile with K rows:      A(r, k) at a + (r/16) * ss + k*16 + r%16
// so that every GEMM of forward and backward (S^T = K Q^T, O^T = V^T P^T, dP^T = V dO^T, dV = P dO,
// dK = dS Q, dQ = dS^T K) reads its operands in the layout they were produced in, without transposes.

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "cpu/flash/tile_config.h"
#include "cpu/flash/vec16.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

enum class ALayout { rows, transposed };
enum class CInit {
  zero,         // C = A B
  load,         // C += A B
  load_scaled,  // C = C * col_scale + A B  (col_scale: one factor per column; the online-softmax rescale)
};

// One MR x (16 NV) block of C. `a` points at A(0, 0) of the block, `b` and `c` at its first strip.
template <int MR, int NV, ALayout AL, CInit CI>
void micro_kernel(const float* a, int64_t a_ss, const float* b, int64_t b_ss, float* c, int64_t c_ss, int64_t K,
                  const float* col_scale) {
  VecF acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      if constexpr (CI == CInit::zero) {
        acc[r][v] = zeros();
      } else if constexpr (CI == CInit::load) {
        acc[r][v] = load(c + v * c_ss + r * kLanes);
      } else {
        acc[r][v] = load(c + v * c_ss + r * kLanes) * load(col_scale + v * kLanes);
      }
    }
  const float* bs[NV];
  for (int v = 0; v < NV; ++v) bs[v] = b + v * b_ss;

  auto step = [&](const float* a_col, int64_t a_row_step, int64_t k) FLASH_INLINE_LAMBDA {
    VecF bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load(bs[v] + k * kLanes);
    for (int r = 0; r < MR; ++r) {
      const VecF ar = splat(a_col[r * a_row_step]);
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(ar, bv[v], acc[r][v]);
    }
  };

  if constexpr (AL == ALayout::rows) {
    // k advances within a 16-column strip of A (stride 1) and jumps a strip every 16.
    int64_t k = 0;
    for (; k + kLanes <= K; k += kLanes) {
      const float* a_strip = a + (k / kLanes) * a_ss;
#pragma GCC unroll 16
      for (int kk = 0; kk < kLanes; ++kk) step(a_strip + kk, kLanes, k + kk);
    }
    for (; k < K; ++k) step(a + (k / kLanes) * a_ss + k % kLanes, kLanes, k);
  } else {
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; ++k) step(a + k * kLanes, 1, k);
  }

  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store(c + v * c_ss + r * kLanes, acc[r][v]);
}

template <ALayout AL, CInit CI>
using MicroKernelFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, const float*);

template <ALayout AL, CInit CI, int Rows, int... Strips>
constexpr std::array<MicroKernelFn<AL, CI>, sizeof...(Strips)> micro_kernel_row(std::integer_sequence<int, Strips...>) {
  return {micro_kernel<Rows, Strips + 1, AL, CI>...};
}

// [rows - 1][strips - 1]: every block shape up to kMicroRows x kMicroStrips.
template <ALayout AL, CInit CI, int... Rows>
constexpr auto micro_kernel_table(std::integer_sequence<int, Rows...>) {
  return std::array{micro_kernel_row<AL, CI, Rows + 1>(std::make_integer_sequence<int, kMicroStrips>{})...};
}

// C (M rows x n_strips strips) op= A (M x K) B (K x n_strips strips). a/b/c point at element (0, 0);
// col_scale (CInit::load_scaled only) holds 16 * n_strips factors.
template <ALayout AL, CInit CI>
void gemm(int64_t M, int64_t n_strips, int64_t K, const float* a, int64_t a_ss, const float* b, int64_t b_ss, float* c,
          int64_t c_ss, const float* col_scale = nullptr) {
  static_assert(kLanes % kMicroRows == 0, "a row block of transposed A must not straddle a strip");
  static constexpr auto kTable = micro_kernel_table<AL, CI>(std::make_integer_sequence<int, kMicroRows>{});
  // Column blocks outside, row blocks inside: the B panel of a column block (K x 16 kMicroStrips floats) is reused by
  // every row block from L1, while A streams through once per column block.
  for (int64_t nb = 0; nb < n_strips; nb += kMicroStrips) {
    const int nv = int(std::min<int64_t>(kMicroStrips, n_strips - nb));
    for (int64_t m0 = 0; m0 < M; m0 += kMicroRows) {
      const int mr = int(std::min<int64_t>(kMicroRows, M - m0));
      const float* a_block = AL == ALayout::rows ? a + m0 * kLanes : a + (m0 / kLanes) * a_ss + m0 % kLanes;
      kTable[mr - 1][nv - 1](a_block, a_ss, b + nb * b_ss, b_ss, c + nb * c_ss + m0 * kLanes, c_ss, K,
                             col_scale ? col_scale + nb * kLanes : nullptr);
    }
  }
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
