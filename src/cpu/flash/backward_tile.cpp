// Query-block packing and the (query block, K/V tile) pair of cpu_flash's backward.

#include "cpu/flash/backward_tile.h"

#include <algorithm>
#include <cstring>

#include "cpu/flash/convert_tile.h"
#include "cpu/flash/microkernel.h"
#include "cpu/flash/microkernel_bf16.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

// Whether the pairs run their GEMMs as bf16 dot products: bf16 storage in a build with AVX-512 BF16, and
// an even head dim (the S^T and dP^T products pair the head dim).
bool runs_dots(const AttnCall& c) {
#if defined(FLASH_AVX512_BF16)
  return c.dtype == DType::bf16 && c.head_dim % 2 == 0;
#else
  (void)c;
  return false;
#endif
}

// Words of one tile of `pairs` pair rows of `columns` columns (whole strips).
int64_t pair_tile_words(int64_t pairs, int64_t columns) { return pairs * strips_of(columns) * kLanes; }

QueryBlock carve_block(const AttnCall& c, TileShape t, Carver& mem) {
  const int64_t D = c.head_dim, Dp = strips_of(D) * kLanes, Br = t.q_rows;
  QueryBlock b;
  b.qt = mem.take(D * Br);
  b.dot = mem.take(D * Br);
  b.q = mem.take(Br * Dp);
  b.dout = mem.take(Br * Dp);
  b.lse2 = mem.take(Br);
  b.dsum = mem.take(Br);
  b.lane_memory = mem.take(RowLanes::kArrays * Br);
  if (runs_dots(c)) {
    auto take_words = [&](int64_t n) { return reinterpret_cast<uint32_t*>(mem.take(n)); };
    b.qt_pairs = take_words(pair_tile_words(D / 2, Br));
    b.dot_pairs = take_words(pair_tile_words(D / 2, Br));
    b.q_pairs = take_words(pair_tile_words(Br / 2, D));
    b.dout_pairs = take_words(pair_tile_words(Br / 2, D));
  }
  return b;
}

PairScratch carve_pair(const AttnCall& c, TileShape t, Carver& mem) {
  const int64_t Dp = strips_of(c.head_dim) * kLanes, Br = t.q_rows, Bc = t.k_rows;
  PairScratch w;
  w.kt = mem.take(Bc * Dp);
  w.vt = mem.take(Bc * Dp);
  w.dk = mem.take(Bc * Dp);
  w.dv = mem.take(Bc * Dp);
  w.st = mem.take(Bc * Br);
  w.dpt = mem.take(Bc * Br);
  w.row = mem.take(2 * kLanes * Dp);
  w.k_off = mem.take_i64(Bc);
  w.v_off = mem.take_i64(Bc);
  if (runs_dots(c)) {
    auto take_words = [&](int64_t n) { return reinterpret_cast<uint32_t*>(mem.take(n)); };
    w.k_rows = take_words(Bc * c.head_dim / 2);
    w.v_rows = take_words(Bc * c.head_dim / 2);
    w.k_pairs = take_words(pair_tile_words((Bc + 1) / 2, c.head_dim));
    w.pt_pairs = take_words(Bc * Br / 2);
    w.dst_pairs = take_words(Bc * Br / 2);
    w.ds_pairs = take_words((Bc + 1) / 2 * Br);
  }
  return w;
}

// Transposes 16 row-major rows (row stride Dp) times `scale` into the strip of a head_dim x 16k strip
// tile (strip stride head_dim * 16).
void rows_to_columns(const float* rows, int64_t Dp, int64_t D, float scale, float* strip) {
  for (int64_t d0 = 0; d0 < D; d0 += kLanes) {
    VecF block[kLanes];
    for (int l = 0; l < kLanes; ++l) block[l] = load(rows + l * Dp + d0) * splat(scale);
    transpose16(block);
    for (int64_t t = 0; t < std::min<int64_t>(kLanes, D - d0); ++t) store(strip + (d0 + t) * kLanes, block[t]);
  }
}

template <DType DT>
void pack_impl(const AttnCall& c, const BwdProblem& p, const SeqRange& range, const AttnSeq& s, int64_t r0, int64_t r1,
               QueryBlock& blk, float* rows) {
  const int64_t D = c.head_dim, nd = strips_of(D), Dp = nd * kLanes;
  blk.r0 = r0;
  fill_lanes(c, s, r0, r1 - r0, blk.lane_memory, blk.lanes);
  const int64_t q_ss = D * kLanes;                          // Q^T, dO^T: head_dim rows
  const int64_t d_ss = blk.lanes.strips * kLanes * kLanes;  // Q, dO: the block's rows
  // The dot products multiply S^T by q_scale in fp32 instead, so that Q stays exact in bf16.
  const bool dots = runs_dots(c);
  float* q_rows = rows;
  float* do_rows = rows + kLanes * Dp;
  for (int64_t k = 0; k < blk.lanes.strips; ++k) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const int64_t lane = k * kLanes + l;
      float* q = q_rows + l * Dp;
      float* dout = do_rows + l * Dp;
      blk.lse2[lane] = INFINITY;  // padding lanes: P = 0
      blk.dsum[lane] = 0.0f;
      if (lane < blk.lanes.n) {
        const int64_t r = r0 + lane, i = r / c.group, h = s.hk * c.group + r % c.group, row = range.q_start + i;
        load_row<DT>(p.q.ptr, p.q.offset(s.b, row, h), D, q);
        load_row<DT>(p.dout.ptr, p.dout.offset(s.b, row, h), D, dout);
        const int64_t o_off = p.out.offset(s.b, row, h);
        VecF dot = zeros();
        for (int64_t t = 0; t < nd; ++t)
          dot = fma(load(dout + t * kLanes),
                    load_n<DT>(p.out.ptr, o_off + t * kLanes, int(std::min<int64_t>(kLanes, D - t * kLanes))), dot);
        blk.dsum[lane] = reduce_add(dot);
        blk.lse2[lane] = p.lse.ptr[p.lse.offset(s.b, row, h)] * kLog2e;
      } else {
        std::fill(q, q + Dp, 0.0f);
        std::fill(dout, dout + Dp, 0.0f);
      }
      for (int64_t t = 0; t < nd; ++t) {
        store(blk.q + t * d_ss + lane * kLanes, load(q + t * kLanes));
        store(blk.dout + t * d_ss + lane * kLanes, load(dout + t * kLanes));
      }
    }
    rows_to_columns(q_rows, Dp, D, dots ? 1.0f : c.q_scale, blk.qt + k * q_ss);
    rows_to_columns(do_rows, Dp, D, 1.0f, blk.dot + k * q_ss);
  }
#if defined(FLASH_AVX512_BF16)
  if (dots) {
    const int64_t qp_ss = pair_tile_words(D / 2, kLanes);                          // Q^T, dO^T pairs: per strip
    const int64_t rp_ss = pair_tile_words(blk.lanes.strips * kLanes / 2, kLanes);  // Q, dO pairs: per head-dim strip
    for (int64_t k = 0; k < blk.lanes.strips; ++k) {
      pack_row_pairs(blk.qt + k * q_ss, D, blk.qt_pairs + k * qp_ss, kLanes);
      pack_row_pairs(blk.dot + k * q_ss, D, blk.dot_pairs + k * qp_ss, kLanes);
    }
    for (int64_t t = 0; t < nd; ++t) {
      pack_row_pairs(blk.q + t * d_ss, blk.lanes.strips * kLanes, blk.q_pairs + t * rp_ss, kLanes);
      pack_row_pairs(blk.dout + t * d_ss, blk.lanes.strips * kLanes, blk.dout_pairs + t * rp_ss, kLanes);
    }
  }
#endif
}

// The elementwise heart of a pair, on one strip (16 query rows): from S^T (raw scaled scores) and dP^T
// (dO . V) to P^T with dropout applied (for dV) and dS^T = P (dP z - D) dlogit/dqk (for dK and dQ).
template <bool Softcap, bool Alibi, bool Masked, bool Dropout>
void gradient_strip(const AttnCall& c, const StripLanes& lanes, int64_t j0, int64_t bc, VecF lse2, VecF dsum, float* st,
                    float* dpt) {
  DropoutLanes drop = dropout_lanes(c.dropout);
  const VecF scale = splat(c.score.softmax_scale);
  for (int64_t j = 0; j < bc; ++j) {
    VecF t;
    VecF x = modify_scores<Softcap, Alibi>(load(st + j * kLanes), lanes, j0 + j, c.cap2, &t);
    if constexpr (Masked) x = select(visible(lanes, j0 + j), x, neg_infinity());
    const VecF prob = exp2(x - lse2);
    VecF dp = load(dpt + j * kLanes);
    VecF kept = prob;
    if constexpr (Dropout) {
      const VecF z = select(drop.keep(lanes, j0 + j), splat(c.dropout_scale), zeros());
      kept = prob * z;
      dp = dp * z;
    }
    VecF dlogit = scale;
    if constexpr (Softcap) dlogit = scale * (splat(1.0f) - t * t);
    store(st + j * kLanes, kept);
    store(dpt + j * kLanes, prob * (dp - dsum) * dlogit);
  }
}

using GradientStripFn = void (*)(const AttnCall&, const StripLanes&, int64_t, int64_t, VecF, VecF, float*, float*);

template <bool Softcap, bool Alibi>
constexpr GradientStripFn kGradientStrips[2][2] = {
    {gradient_strip<Softcap, Alibi, false, false>, gradient_strip<Softcap, Alibi, false, true>},
    {gradient_strip<Softcap, Alibi, true, false>, gradient_strip<Softcap, Alibi, true, true>}};

GradientStripFn gradient_strip_for(bool softcap, bool alibi, bool masked, bool dropout) {
  if (softcap)
    return alibi ? kGradientStrips<true, true>[masked][dropout] : kGradientStrips<true, false>[masked][dropout];
  return alibi ? kGradientStrips<false, true>[masked][dropout] : kGradientStrips<false, false>[masked][dropout];
}

#if defined(FLASH_AVX512_BF16)
// S^T = K Q^T (scaled by q_scale in fp32) and dP^T = V dO^T of strips [lo, hi) on bf16 dot products.
void scores_dots(const AttnCall& c, TileShape t, const QueryBlock& blk, int64_t bc, const PairScratch& w, int64_t lo,
                 int64_t hi) {
  const int64_t half = c.head_dim / 2, kv_ss = t.k_rows * kLanes, qp_ss = half * kLanes;
  gemm_bf16<ALayout::rows, CInit::zero>(bc, hi - lo, half, w.k_rows, half, blk.qt_pairs + lo * qp_ss, qp_ss,
                                        w.st + lo * kv_ss, kv_ss, nullptr, c.q_scale);
  gemm_bf16<ALayout::rows, CInit::zero>(bc, hi - lo, half, w.v_rows, half, blk.dot_pairs + lo * qp_ss, qp_ss,
                                        w.dpt + lo * kv_ss, kv_ss, nullptr, 1.0f);
}

// dV += P^T dO and dK += dS^T Q (dkdv), dQ += dS K (dq) of strips [lo, hi) on bf16 dot products: P^T and
// dS^T are rounded to bf16 once per product that reads them, paired along the query rows for dV and dK
// and along the keys for dQ (both roundings of dS give the same bf16 values).
void gradients_dots(const AttnCall& c, TileShape t, const QueryBlock& blk, int64_t bc, const PairScratch& w, int64_t lo,
                    int64_t hi, bool dkdv, float* dq) {
  const int64_t nd = strips_of(c.head_dim), strips = blk.lanes.strips, n = hi - lo;
  const int64_t kv_ss = t.k_rows * kLanes;
  if (dkdv) {
    const int64_t row_pairs = n * kLanes / 2;                            // the K of dV and dK
    const int64_t rp_ss = pair_tile_words(strips * kLanes / 2, kLanes);  // Q, dO pairs
    const int64_t rp0 = lo * kLanes / 2 * kLanes;                        // first pair row of the range
    for (int64_t j = 0; j < bc; ++j)
      for (int64_t k = lo; k < hi; ++k) {
        const int64_t at = j * row_pairs + (k - lo) * kLanes / 2;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.pt_pairs + at),
                            lane_pair_words(load(w.st + k * kv_ss + j * kLanes)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w.dst_pairs + at),
                            lane_pair_words(load(w.dpt + k * kv_ss + j * kLanes)));
      }
    gemm_bf16<ALayout::rows, CInit::load>(bc, nd, row_pairs, w.pt_pairs, row_pairs, blk.dout_pairs + rp0, rp_ss, w.dv,
                                          kv_ss, nullptr, 1.0f);
    gemm_bf16<ALayout::rows, CInit::load>(bc, nd, row_pairs, w.dst_pairs, row_pairs, blk.q_pairs + rp0, rp_ss, w.dk,
                                          kv_ss, nullptr, 1.0f);
  }
  if (dq) {
    const int64_t rows = n * kLanes, key_pairs = (bc + 1) / 2;
    const int64_t kp_ss = pair_tile_words((t.k_rows + 1) / 2, kLanes);
    for (int64_t k = lo; k < hi; ++k) pack_row_pairs(w.dpt + k * kv_ss, bc, w.ds_pairs + (k - lo) * kLanes, rows);
    const int64_t d_ss = strips * kLanes * kLanes;
    gemm_bf16<ALayout::transposed, CInit::load>(rows, nd, key_pairs, w.ds_pairs, rows, w.k_pairs, kp_ss,
                                                dq + lo * kLanes * kLanes, d_ss, nullptr, 1.0f);
  }
}
#endif

}  // namespace

int64_t query_block_floats(const AttnCall& c, TileShape t) {
  Carver mem(nullptr);
  carve_block(c, t, mem);
  return mem.used();
}

QueryBlock carve_query_block(const AttnCall& c, TileShape t, float* base) {
  Carver mem(base);
  return carve_block(c, t, mem);
}

int64_t pair_scratch_floats(const AttnCall& c, TileShape t) {
  Carver mem(nullptr);
  carve_pair(c, t, mem);
  return mem.used();
}

PairScratch carve_pair_scratch(const AttnCall& c, TileShape t, float* base) {
  Carver mem(base);
  return carve_pair(c, t, mem);
}

void pack_query_block(const AttnCall& c, const BwdProblem& p, const SeqRange& range, const AttnSeq& s, int64_t r0,
                      int64_t r1, QueryBlock& blk, float* row) {
  dispatch_dtype(c.dtype, [&](auto dt) { pack_impl<decltype(dt)::value>(c, p, range, s, r0, r1, blk, row); });
}

void load_kv_tile(const AttnCall& c, const AttnSeq& s, TileShape t, int64_t j0, int64_t bc, const PairScratch& w) {
  const int64_t ss = t.k_rows * kLanes;
  s.keys.offsets(j0, bc, w.k_off, w.v_off);
#if defined(FLASH_AVX512_BF16)
  if (runs_dots(c)) {
    const int64_t D = c.head_dim;
    for (int64_t j = 0; j < bc; ++j) {
      std::memcpy(w.k_rows + j * (D / 2), static_cast<const uint16_t*>(s.keys.k) + w.k_off[j], size_t(D) * 2);
      std::memcpy(w.v_rows + j * (D / 2), static_cast<const uint16_t*>(s.keys.v) + w.v_off[j], size_t(D) * 2);
    }
    const int64_t kp_ss = pair_tile_words((t.k_rows + 1) / 2, kLanes);
    // The lanes past the head dim of the last strip are read by dQ's GEMM (into columns never stored):
    // zeros, not stale words.
    if (D % kLanes != 0) std::fill(w.k_pairs, w.k_pairs + strips_of(D) * kp_ss, 0u);
    pack_key_pairs(s.keys.k, w.k_off, bc, D, w.k_pairs, kLanes, kp_ss);
    return;
  }
#endif
  dispatch_dtype(c.dtype, [&](auto dt) {
    rows_to_strips<decltype(dt)::value>(s.keys.k, w.k_off, bc, c.head_dim, w.kt, ss);
    rows_to_strips<decltype(dt)::value>(s.keys.v, w.v_off, bc, c.head_dim, w.vt, ss);
  });
}

bool pair_visible(const QueryBlock& blk, int64_t j0, int64_t bc) {
  for (int64_t l = 0; l < blk.lanes.n; ++l)
    if (blk.lanes.key_begin[l] < j0 + bc && j0 < blk.lanes.key_end[l] && blk.lanes.key_begin[l] < blk.lanes.key_end[l])
      return true;
  return false;
}

void backward_pair(const AttnCall& c, TileShape t, const QueryBlock& blk, int64_t j0, int64_t bc, const PairScratch& w,
                   bool dkdv, float* dq) {
  const int64_t D = c.head_dim, nd = strips_of(D), strips = blk.lanes.strips;
  const int64_t kv_ss = t.k_rows * kLanes;        // K/V tiles, their gradients, S^T and dP^T: k_rows rows
  const int64_t q_ss = D * kLanes;                // Q^T, dO^T
  const int64_t d_ss = strips * kLanes * kLanes;  // Q, dO, dQ: the block's rows
  // Only the strips (16 rows) that see a key of the tile take part (causal and window bands).
  StripLanes lanes[kMaxStrips];
  int64_t lo = strips, hi = 0;
  for (int64_t k = 0; k < strips; ++k) {
    lanes[k] = strip_lanes(blk.lanes, k, j0, j0 + bc);
    if (!lanes[k].none_visible) {
      lo = std::min(lo, k);
      hi = k + 1;
    }
  }
  if (lo >= hi) return;
  const int64_t n = hi - lo, rows = n * kLanes;  // padding lanes inside hold P = dS = 0
  float* st = w.st + lo * kv_ss;
  float* dpt = w.dpt + lo * kv_ss;

  const bool dots = runs_dots(c);
#if defined(FLASH_AVX512_BF16)
  if (dots) scores_dots(c, t, blk, bc, w, lo, hi);
#endif
  if (!dots) {
    gemm<ALayout::rows, CInit::zero>(bc, n, D, w.kt, kv_ss, blk.qt + lo * q_ss, q_ss, st, kv_ss);
    gemm<ALayout::rows, CInit::zero>(bc, n, D, w.vt, kv_ss, blk.dot + lo * q_ss, q_ss, dpt, kv_ss);
  }
  for (int64_t k = lo; k < hi; ++k) {
    const GradientStripFn fn = gradient_strip_for(c.softcap(), c.alibi(), !lanes[k].all_visible, c.dropout_on());
    fn(c, lanes[k], j0, bc, load(blk.lse2 + k * kLanes), load(blk.dsum + k * kLanes), w.st + k * kv_ss,
       w.dpt + k * kv_ss);
  }
#if defined(FLASH_AVX512_BF16)
  if (dots) {
    gradients_dots(c, t, blk, bc, w, lo, hi, dkdv, dq);
    return;
  }
#endif
  const int64_t row0 = lo * kLanes * kLanes;  // first row of the range in the Q / dO / dQ tiles
  if (dkdv) {
    gemm<ALayout::rows, CInit::load>(bc, nd, rows, st, kv_ss, blk.dout + row0, d_ss, w.dv, kv_ss);
    gemm<ALayout::rows, CInit::load>(bc, nd, rows, dpt, kv_ss, blk.q + row0, d_ss, w.dk, kv_ss);
  }
  if (dq) gemm<ALayout::transposed, CInit::load>(rows, nd, bc, dpt, kv_ss, w.kt, kv_ss, dq + row0, d_ss);
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
