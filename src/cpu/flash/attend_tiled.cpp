// Tiled FlashAttention-2 forward for one tile of packed query rows (FlashAttention-2, Dao 2023, Alg. 1):
// the rows' Q^T is packed once, then for each K/V tile of their visible key range
//   S^T = K Q^T  ->  online softmax (max, exp2, sum; mask only on boundary tiles)  ->  O^T = a O^T + V^T P^T
// with query rows in vector lanes throughout (see microkernel.h for the layouts). bf16 inputs on CPUs with
// AVX-512 BF16 run both GEMMs as bf16 dot products (microkernel_bf16.h) on bf16 copies of the tiles: Q
// and K exact, P rounded to bf16 as the GPU kernels round it, the scale applied to S in fp32.

#include <algorithm>
#include <cstring>

#include "cpu/flash/convert_tile.h"
#include "cpu/flash/engines.h"
#include "cpu/flash/microkernel.h"
#include "cpu/flash/microkernel_bf16.h"
#include "cpu/flash/online_softmax.h"
#include "cpu/flash/row_lanes.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

// Whether both GEMMs run as bf16 dot products for storage types S in this build.
template <typename S>
constexpr bool kDotBf16 =
#if defined(FLASH_AVX512_BF16)
    (S::q == DType::bf16 && S::kv == DType::bf16);
#else
    false;
#endif

struct TiledScratch {
  float* qt;  // Q^T: head_dim rows x q_rows columns
  float* ot;  // O^T accumulator, same shape
  float* st;  // S^T / P^T: k_rows x q_rows
  float* kt;  // K tile: k_rows x head_dim (padded to whole strips)
  float* vt;  // V tile, same
  float* m;
  float* l;
  float* alpha;
  float* lanes;
  float* rows;  // 16 rows of head_dim (padded): one strip of queries or outputs, row-major
  int64_t* k_off;
  int64_t* v_off;
  // bf16 dot-product path only (microkernel_bf16.h layouts): Q^T and P^T as pair rows of a strip tile,
  // K row-major and V as key pairs.
  uint32_t* qp;
  uint32_t* pp;
  uint32_t* kp;
  uint32_t* vp;
};

TiledScratch carve(const AttnCall& c, TileShape t, Carver& mem) {
  const int64_t D = c.head_dim, Dp = strips_of(D) * kLanes, Br = t.q_rows, Bc = t.k_rows;
  TiledScratch s;
  s.qt = mem.take(D * Br);
  s.ot = mem.take(D * Br);
  s.st = mem.take(Bc * Br);
  s.kt = mem.take(Bc * Dp);
  s.vt = mem.take(Bc * Dp);
  s.m = mem.take(Br);
  s.l = mem.take(Br);
  s.alpha = mem.take(Br);
  s.lanes = mem.take(RowLanes::kArrays * Br);
  s.rows = mem.take(kLanes * Dp);
  s.k_off = mem.take_i64(Bc);
  s.v_off = mem.take_i64(Bc);
  if (c.dtype == DType::bf16) {
    s.qp = reinterpret_cast<uint32_t*>(mem.take(D / 2 * Br));
    s.pp = reinterpret_cast<uint32_t*>(mem.take(Bc / 2 * Br));
    s.kp = reinterpret_cast<uint32_t*>(mem.take(Bc * D / 2));
    s.vp = reinterpret_cast<uint32_t*>(mem.take(Bc / 2 * D));
  }
  return s;
}

// Q^T of the tile: each strip's 16 query rows are loaded (converted, rotated, scaled) row-major, then
// transposed 16 x 16 at a time into the strip's columns.
template <DType DT>
void pack_queries(const AttnCall& c, const AttnSeq& s, const RowLanes& lanes, int64_t r0, float scale, float* rows,
                  float* qt) {
  const int64_t D = c.head_dim, Dp = strips_of(D) * kLanes, q_ss = D * kLanes;
  for (int64_t k = 0; k < lanes.strips; ++k) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const int64_t lane = k * kLanes + l, r = r0 + lane;
      if (lane < lanes.n)
        load_query<DT>(c, s, r / c.group, s.hk * c.group + r % c.group, rows + l * Dp, scale);
      else
        std::fill(rows + l * Dp, rows + (l + 1) * Dp, 0.0f);
    }
    for (int64_t d0 = 0; d0 < D; d0 += kLanes) {
      VecF block[kLanes];
      for (int l = 0; l < kLanes; ++l) block[l] = load(rows + l * Dp + d0);
      transpose16(block);
      for (int64_t t = 0; t < std::min<int64_t>(kLanes, D - d0); ++t)
        store(qt + k * q_ss + (d0 + t) * kLanes, block[t]);
    }
  }
}

// The inverse for the outputs: O^T strips transposed back to rows, normalised and stored with their LSE.
template <DType DT>
void write_outputs(const AttnCall& c, const AttnSeq& s, const RowLanes& lanes, int64_t r0, const float* ot,
                   const float* m, const float* l, float* rows) {
  const int64_t D = c.head_dim, Dp = strips_of(D) * kLanes, q_ss = D * kLanes;
  for (int64_t k = 0; k < lanes.strips; ++k) {
    for (int64_t d0 = 0; d0 < D; d0 += kLanes) {
      VecF block[kLanes];
      for (int64_t t = 0; t < kLanes; ++t) block[t] = d0 + t < D ? load(ot + k * q_ss + (d0 + t) * kLanes) : zeros();
      transpose16(block);
      for (int t = 0; t < kLanes; ++t) store(rows + t * Dp + d0, block[t]);
    }
    for (int64_t lane = k * kLanes; lane < std::min((k + 1) * kLanes, lanes.n); ++lane) {
      const int64_t r = r0 + lane;
      write_output_row<DT>(c, s, r / c.group, s.hk * c.group + r % c.group, rows + (lane - k * kLanes) * Dp, m[lane],
                           l[lane]);
    }
  }
}

template <typename S>
void attend_tiled_impl(const AttnCall& c, const AttnSeq& s, TileShape t, int64_t r0, int64_t r1, float* scratch) {
  const int64_t D = c.head_dim, Bc = t.k_rows;
  Carver mem(scratch);
  const TiledScratch w = carve(c, t, mem);
  RowLanes lanes;
  fill_lanes(c, s, r0, r1 - r0, w.lanes, lanes);
  const int64_t strips = lanes.strips;
  // Strip strides: Q^T and O^T have head_dim rows, S^T and the K/V tiles k_rows rows.
  const int64_t q_ss = D * kLanes, kv_ss = Bc * kLanes;

  // The dot products take the head dim in pairs: an odd head dim runs the fp32 path.
  const bool dot = kDotBf16<S> && D % 2 == 0;
  // The dot-product path multiplies the scores by q_scale in fp32 instead, so that Q stays exact in bf16.
  const float q_scale = c.q_scale * s.score_factor;
  pack_queries<S::q>(c, s, lanes, r0, dot ? 1.0f : q_scale, w.rows, w.qt);
#if defined(FLASH_AVX512_BF16)
  const int64_t qp_ss = D / 2 * kLanes, pp_ss = Bc / 2 * kLanes;
  if constexpr (kDotBf16<S>) {
    if (dot)
      for (int64_t k = 0; k < strips; ++k) pack_row_pairs(w.qt + k * q_ss, D, w.qp + k * qp_ss, kLanes);
  }
#endif
  std::fill(w.ot, w.ot + strips * q_ss, 0.0f);
  std::fill(w.m, w.m + strips * kLanes, -INFINITY);
  std::fill(w.l, w.l + strips * kLanes, 0.0f);

  for (int64_t j0 = lanes.key_min; j0 < lanes.key_max; j0 += Bc) {
    const int64_t bc = std::min(Bc, lanes.key_max - j0);
    // Only the strips (16 rows) that see a key of the tile take part: under causal or window masks the
    // rows before (or after) the band would compute scores only to mask them all.
    StripLanes strip[kMaxStrips];
    int64_t lo = strips, hi = 0;
    for (int64_t k = 0; k < strips; ++k) {
      strip[k] = strip_lanes(lanes, k, j0, j0 + bc);
      if (!strip[k].none_visible) {
        lo = std::min(lo, k);
        hi = k + 1;
      }
    }
    if (lo >= hi) continue;  // a tile between the bands of a sliding window

    s.keys.offsets(j0, bc, w.k_off, w.v_off);
#if defined(FLASH_AVX512_BF16)
    if constexpr (kDotBf16<S>) {
      if (dot) {
        for (int64_t j = 0; j < bc; ++j)
          std::memcpy(w.kp + j * (D / 2), static_cast<const uint16_t*>(s.keys.k) + w.k_off[j], size_t(D) * 2);
        pack_key_pairs(s.keys.v, w.v_off, bc, D, w.vp, D, kLanes);
        gemm_bf16<ALayout::rows, CInit::zero>(bc, hi - lo, D / 2, w.kp, D / 2, w.qp + lo * qp_ss, qp_ss,
                                              w.st + lo * kv_ss, kv_ss, nullptr, q_scale);
      }
    }
#endif
    if (!dot) {
      rows_to_strips<S::kv>(s.keys.k, w.k_off, bc, D, w.kt, kv_ss);
      rows_to_strips<S::kv>(s.keys.v, w.v_off, bc, D, w.vt, kv_ss);
      gemm<ALayout::rows, CInit::zero>(bc, hi - lo, D, w.kt, kv_ss, w.qt + lo * q_ss, q_ss, w.st + lo * kv_ss, kv_ss);
    }
    for (int64_t k = lo; k < hi; ++k) {
      DropoutLanes drop = dropout_lanes(c.dropout);
      const OnlineSoftmaxFn softmax = online_softmax_for(c.softcap(), c.alibi(), !strip[k].all_visible);
      const VecF alpha = softmax(c, strip[k], j0, bc, w.st + k * kv_ss,
                                 SoftmaxState{w.m + k * kLanes, w.l + k * kLanes}, c.dropout_on() ? &drop : nullptr);
      store(w.alpha + k * kLanes, alpha);
    }
#if defined(FLASH_AVX512_BF16)
    if constexpr (kDotBf16<S>) {
      if (dot) {
        const int64_t pairs = (bc + 1) / 2;
        for (int64_t k = lo; k < hi; ++k) pack_row_pairs(w.st + k * kv_ss, bc, w.pp + k * pp_ss, kLanes);
        gemm_bf16<ALayout::transposed, CInit::load_scaled>(D, hi - lo, pairs, w.vp, D, w.pp + lo * pp_ss, pp_ss,
                                                           w.ot + lo * q_ss, q_ss, w.alpha + lo * kLanes, 1.0f);
      }
    }
#endif
    if (!dot)
      gemm<ALayout::transposed, CInit::load_scaled>(D, hi - lo, bc, w.vt, kv_ss, w.st + lo * kv_ss, kv_ss,
                                                    w.ot + lo * q_ss, q_ss, w.alpha + lo * kLanes);
  }

  write_outputs<S::out>(c, s, lanes, r0, w.ot, w.m, w.l, w.rows);
}

}  // namespace

int64_t tiled_scratch_floats(const AttnCall& c, TileShape t) {
  Carver mem(nullptr);
  carve(c, t, mem);
  return mem.used();
}

void attend_tiled(const AttnCall& c, const AttnSeq& s, TileShape t, int64_t r0, int64_t r1, float* scratch) {
  dispatch_storage(c.dtype, c.kv_dtype,
                   [&](auto storage) { attend_tiled_impl<decltype(storage)>(c, s, t, r0, r1, scratch); });
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
