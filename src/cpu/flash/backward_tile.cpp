// Query-block packing and the (query block, K/V tile) pair of cpu_flash's backward.

#include "cpu/flash/backward_tile.h"

#include <algorithm>

#include "cpu/flash/convert_tile.h"
#include "cpu/flash/microkernel.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

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
    rows_to_columns(q_rows, Dp, D, c.q_scale, blk.qt + k * q_ss);
    rows_to_columns(do_rows, Dp, D, 1.0f, blk.dot + k * q_ss);
  }
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

  gemm<ALayout::rows, CInit::zero>(bc, n, D, w.kt, kv_ss, blk.qt + lo * q_ss, q_ss, st, kv_ss);
  gemm<ALayout::rows, CInit::zero>(bc, n, D, w.vt, kv_ss, blk.dot + lo * q_ss, q_ss, dpt, kv_ss);
  for (int64_t k = lo; k < hi; ++k) {
    const GradientStripFn fn = gradient_strip_for(c.softcap(), c.alibi(), !lanes[k].all_visible, c.dropout_on());
    fn(c, lanes[k], j0, bc, load(blk.lse2 + k * kLanes), load(blk.dsum + k * kLanes), w.st + k * kv_ss,
       w.dpt + k * kv_ss);
  }
  const int64_t row0 = lo * kLanes * kLanes;  // first row of the range in the Q / dO / dQ tiles
  if (dkdv) {
    gemm<ALayout::rows, CInit::load>(bc, nd, rows, st, kv_ss, blk.dout + row0, d_ss, w.dv, kv_ss);
    gemm<ALayout::rows, CInit::load>(bc, nd, rows, dpt, kv_ss, blk.q + row0, d_ss, w.dk, kv_ss);
  }
  if (dq) gemm<ALayout::transposed, CInit::load>(rows, nd, bc, dpt, kv_ss, w.kt, kv_ss, dq + row0, d_ss);
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
