// Decode path: a (sequence, kv head) with at most kDecodeMaxRows packed query rows (seqlen_q 1 or a few,
// times the GQA group). Tiles with rows in vector lanes would leave most lanes idle here, and each K/V
// element is used by only a few rows, so converting K/V tiles to fp32 first would cost as much memory
// traffic as the attention itself. Instead this path reads K and V straight from storage:
//   S = q K^T   vectorised over head dim, 16 keys at a time, finished by one transposing reduction;
//   softmax     online per block of kDecodeBlock keys (keys in lanes);
//   O += P V    vectorised over head dim, the row's accumulator in registers for the block.
// A pass covers several kv heads of one sequence, key block by key block, so that it reads K and V
// sequentially in (seqlen, heads_k, head_dim) layouts. The result is a partial (m, l, unnormalised O)
// so that key splits can run on different threads and be merged (split-KV, "flash-decoding").

#include <algorithm>

#include "common/philox.h"
#include "cpu/flash/convert_tile.h"
#include "cpu/flash/engines.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash {

namespace {

struct DecodeScratch {
  float* q;  // heads x kDecodeMaxRows x Dp, row-major
  float* merged;
  int64_t* k_off;  // heads x kDecodeBlock: the key block's element offsets
  int64_t* v_off;
};

DecodeScratch carve(const AttnCall& c, int64_t heads, Carver& mem) {
  const int64_t Dp = strips_of(c.head_dim) * kLanes;
  DecodeScratch s;
  s.q = mem.take(heads * kDecodeMaxRows * Dp);
  s.merged = mem.take(Dp);
  s.k_off = mem.take_i64(heads * kDecodeBlock);
  s.v_off = mem.take_i64(heads * kDecodeBlock);
  return s;
}

// q . k_j for the 16 keys at element offsets k_off[0..16), vectorised over head dim; the sixteen
// accumulators stay in registers and are finished by one transposing reduction.
template <DType DT>
FLASH_INLINE VecF dot16(const float* q, const void* k, const int64_t* k_off, int64_t dim) {
  VecF acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = zeros();
  const int64_t full = dim / kLanes;
  for (int64_t t = 0; t < full; ++t) {
    const VecF qv = load(q + t * kLanes);
    for (int j = 0; j < kLanes; ++j) acc[j] = fma(qv, load16<DT>(k, k_off[j] + t * kLanes), acc[j]);
  }
  if (const int tail = int(dim % kLanes)) {
    const VecF qv = load(q + full * kLanes);
    for (int j = 0; j < kLanes; ++j) acc[j] = fma(qv, load_n<DT>(k, k_off[j] + full * kLanes, tail), acc[j]);
  }
  return transpose_sum16(acc);
}

// acc[t] = acc[t] * alpha + sum_j p[j] V_j(strip t) for strips [t0, t0 + NC), in registers so that the
// FMA chains of the strips run in parallel. Tail: the last strip holds dim % 16 elements.
template <DType DT, int NC, bool Tail>
FLASH_INLINE void pv_strips(float* acc, float alpha, const float* p, int64_t n, const void* v, const int64_t* v_off,
                            int64_t t0, int64_t dim) {
  VecF a[NC];
  for (int t = 0; t < NC; ++t) a[t] = load(acc + (t0 + t) * kLanes) * splat(alpha);
  for (int64_t j = 0; j < n; ++j) {
    const VecF pj = splat(p[j]);
    for (int t = 0; t < NC; ++t) {
      const int64_t off = v_off[j] + (t0 + t) * kLanes;
      const VecF x = Tail && t == NC - 1 ? load_n<DT>(v, off, int(dim % kLanes)) : load16<DT>(v, off);
      a[t] = fma(pj, x, a[t]);
    }
  }
  for (int t = 0; t < NC; ++t) store(acc + (t0 + t) * kLanes, a[t]);
}

template <DType DT, bool Tail>
void pv_tail_block(float* acc, float alpha, const float* p, int64_t n, const void* v, const int64_t* v_off, int64_t t0,
                   int64_t dim) {
  switch (strips_of(dim) - t0) {
    case 8:
      pv_strips<DT, 8, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 7:
      pv_strips<DT, 7, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 6:
      pv_strips<DT, 6, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 5:
      pv_strips<DT, 5, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 4:
      pv_strips<DT, 4, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 3:
      pv_strips<DT, 3, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 2:
      pv_strips<DT, 2, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    case 1:
      pv_strips<DT, 1, Tail>(acc, alpha, p, n, v, v_off, t0, dim);
      break;
    default:
      break;
  }
}

template <DType DT>
void pv_row(float* acc, float alpha, const float* p, int64_t n, const void* v, const int64_t* v_off, int64_t dim) {
  constexpr int kBlock = 8;  // 8 accumulators hide the FMA latency; more would spill with the loads
  const int64_t strips = strips_of(dim);
  int64_t t = 0;
  for (; t + kBlock < strips; t += kBlock) pv_strips<DT, kBlock, false>(acc, alpha, p, n, v, v_off, t, dim);
  if (dim % kLanes)
    pv_tail_block<DT, true>(acc, alpha, p, n, v, v_off, t, dim);
  else
    pv_tail_block<DT, false>(acc, alpha, p, n, v, v_off, t, dim);
}

struct DecodeRow {
  int64_t i, h, key_begin, key_end, diagonal;
  float slope2;
};

// One row against the key block [j0, j0 + n), n <= kDecodeBlock: scores in log2 units (softcap, ALiBi,
// mask) 16 keys at a time, one online-softmax update of (m, l) for the block, then acc += P V. The
// caller passes only blocks holding a key the row sees, and k_off padded to a multiple of 16 entries.
template <DType DT>
void decode_block(const AttnCall& c, const AttnSeq& s, const DecodeRow& row, const float* q, const int64_t* k_off,
                  const int64_t* v_off, int64_t j0, int64_t n, float* acc, float* m, float* l) {
  static constexpr uint32_t kIota[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  constexpr int64_t kSub = kDecodeBlock / kLanes;
  const int64_t subs = strips_of(n);
  VecF x[kSub];
  VecF block_max = neg_infinity();
  for (int64_t b = 0; b < subs; ++b) {
    x[b] = dot16<DT>(q, s.keys.k, k_off + b * kLanes, c.head_dim);
    const VecU key = splat_u(uint32_t(j0 + b * kLanes)) + load(kIota);
    if (c.softcap()) x[b] = tanh(x[b]) * splat(c.cap2);
    if (c.alibi()) x[b] = x[b] - splat(row.slope2) * abs_to_float(splat_u(uint32_t(row.diagonal)) - key);
    // Lanes past n lie past key_end (or past the keys of this pass): masked like invisible keys.
    const LaneMask seen =
        LaneMask(~less_i(key, splat_u(uint32_t(row.key_begin))) & less_i(key, splat_u(uint32_t(row.key_end))));
    x[b] = select(seen, x[b], neg_infinity());
    block_max = max(block_max, x[b]);
  }
  // m stays -inf until a finite score is seen (std::max keeps its first operand against a NaN); then 0 is
  // subtracted instead, as in the tiled engine, so that exp2 gives 0 for -inf scores and NaN for NaN ones.
  const float m_new = std::max(*m, reduce_max(block_max));
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = std::exp2(*m - m_use);
  const uint32_t threshold = dropout_threshold(c.dropout.p);
  alignas(64) float probs[kDecodeBlock];
  VecF sum = zeros();
  for (int64_t b = 0; b < subs; ++b) {
    VecF p = exp2(x[b] - splat(m_use));
    sum = sum + p;
    if (c.dropout_on()) {
      LaneMask keep = 0;
      for (int64_t t = 0; t < std::min<int64_t>(kLanes, n - b * kLanes); ++t) {
        const int64_t j = j0 + b * kLanes + t;
        const uint32_t word = philox_word(dropout_words(c.dropout, s.b, row.h, c.heads, row.i, j), j);
        keep |= LaneMask(word >= threshold ? 1u : 0u) << t;
      }
      p = select(keep, p, zeros());
    }
    store(probs + b * kLanes, p);
  }
  *l = *l * alpha + reduce_add(sum);
  *m = m_new;
  pv_row<DT>(acc, alpha, probs, n, s.keys.v, v_off, c.head_dim);
}

template <DType DT>
void attend_decode_impl(const AttnCall& c, const AttnSeq* seqs, int64_t heads, int64_t k0, int64_t k1,
                        const DecodePartial* out, float* scratch) {
  const int64_t D = c.head_dim, Dp = strips_of(D) * kLanes, R = seqs[0].rows(c);
  Carver mem(scratch);
  const DecodeScratch w = carve(c, heads, mem);
  const Mask mask = seqs[0].mask(c);
  DecodeRow rows[kDecodeMaxHeads][kDecodeMaxRows];
  int64_t lo = k1, hi = k0;
  for (int64_t hd = 0; hd < heads; ++hd) {
    const AttnSeq& s = seqs[hd];
    for (int64_t r = 0; r < R; ++r) {
      DecodeRow& row = rows[hd][r];
      row.i = r / c.group;
      row.h = s.hk * c.group + r % c.group;
      row.key_begin = std::max(k0, mask.key_begin(row.i));
      row.key_end = std::min(k1, mask.key_end(row.i));
      row.diagonal = mask.diagonal(row.i);
      row.slope2 = alibi_slope(c.score, s.b, row.h) * kLog2e;
      if (row.key_begin < row.key_end) {
        lo = std::min(lo, row.key_begin);
        hi = std::max(hi, row.key_end);
      }
      float* q = w.q + (hd * kDecodeMaxRows + r) * Dp;
      load_query<DT>(c, s, row.i, row.h, q);
      float* acc = out[hd].acc + r * out[hd].acc_stride;
      std::fill(acc, acc + Dp, 0.0f);
      out[hd].m[r] = -INFINITY;
      out[hd].l[r] = 0.0f;
    }
  }

  for (int64_t j0 = lo; j0 < hi; j0 += kDecodeBlock) {
    const int64_t n = std::min(kDecodeBlock, hi - j0);
    for (int64_t hd = 0; hd < heads; ++hd) {
      int64_t* k_off = w.k_off + hd * kDecodeBlock;
      int64_t* v_off = w.v_off + hd * kDecodeBlock;
      seqs[hd].keys.offsets(j0, n, k_off, v_off);
      // A partial block repeats its last key in the unused lanes (masked afterwards): dot16 stays branch-free.
      std::fill(k_off + n, k_off + round_up(n, kLanes), k_off[n - 1]);
      for (int64_t r = 0; r < R; ++r) {
        const DecodeRow& row = rows[hd][r];
        if (row.key_end <= j0 || row.key_begin >= j0 + n) continue;
        decode_block<DT>(c, seqs[hd], row, w.q + (hd * kDecodeMaxRows + r) * Dp, k_off, v_off, j0, n,
                         out[hd].acc + r * out[hd].acc_stride, out[hd].m + r, out[hd].l + r);
      }
    }
  }
}

template <DType DT>
void finish_decode_impl(const AttnCall& c, const AttnSeq& s, const DecodePartial* parts, int64_t n, float* scratch) {
  const int64_t D = c.head_dim, R = s.rows(c);
  Carver mem(scratch);
  const DecodeScratch w = carve(c, 1, mem);
  for (int64_t r = 0; r < R; ++r) {
    float m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, parts[k].m[r]);
    const float m_use = m == -INFINITY ? 0.0f : m;
    float l = 0.0f;
    std::fill(w.merged, w.merged + D, 0.0f);
    // A partial with l == 0 saw no key; one with l NaN saw a NaN score and must make the row NaN (its
    // factor may be 0, and NaN * 0 stays NaN).
    for (int64_t k = 0; k < n; ++k) {
      if (parts[k].l[r] == 0.0f) continue;
      const float f = std::exp2(parts[k].m[r] - m_use);
      l += parts[k].l[r] * f;
      const float* acc = parts[k].acc + r * parts[k].acc_stride;
      for (int64_t d = 0; d < D; ++d) w.merged[d] += acc[d] * f;
    }
    write_output_row<DT>(c, s, r / c.group, s.hk * c.group + r % c.group, w.merged, m, l);
  }
}

}  // namespace

int64_t decode_scratch_floats(const AttnCall& c, int64_t heads) {
  Carver mem(nullptr);
  carve(c, heads, mem);
  return mem.used();
}

void attend_decode(const AttnCall& c, const AttnSeq* seqs, int64_t heads, int64_t k0, int64_t k1,
                   const DecodePartial* out, float* scratch) {
  dispatch_dtype(c.dtype,
                 [&](auto dt) { attend_decode_impl<decltype(dt)::value>(c, seqs, heads, k0, k1, out, scratch); });
}

void finish_decode(const AttnCall& c, const AttnSeq& s, const DecodePartial* parts, int64_t n, float* scratch) {
  dispatch_dtype(c.dtype, [&](auto dt) { finish_decode_impl<decltype(dt)::value>(c, s, parts, n, scratch); });
}

}  // namespace flashattn::detail::cpu_flash
