// Decode path: a (sequence, kv head) with at most kDecodeMaxRows packed query rows (seqlen_q 1 or a few,
// times the GQA group). Tiles with rows in vector lanes would leave most lanes idle here, and each K/V
// element is used by only a few rows, so converting K/V tiles to fp32 first would cost as much memory
// traffic as the attention itself. Instead this path reads K and V straight from storage. A pass covers
// several kv heads of one sequence, block of kDecodeBlock keys by block, in three phases per block:
//   S = q K^T   key by key, and per key every head and row: one FMA chain over head dim leaves 16 lane
//               partial sums, and a transposing reduction per 16 keys finishes the scores;
//   softmax     one online step per row for the whole block (keys in lanes);
//   O += P V    key by key, and per key every head and row, into the rows' fp32 accumulators (in L1).
// In (seqlen, heads_k, head_dim) layouts the heads' rows of one key are adjacent, so the S and P V phases
// each stream one of K and V front to back, with no dependency between steps that would stall the loads.
// Alternating S, softmax and P V per head and 32 keys made every P V wait on a softmax (reductions,
// exp2) and walked each head's rows 2 KiB apart; it ran the decode shape at 76-78% of the read
// bandwidth. The result is a partial (m, l, unnormalised O) so that key splits can run on different
// threads and be merged (split-KV, "flash-decoding").

#include <algorithm>
#include <utility>

#include "common/philox.h"
#include "cpu/flash/convert_tile.h"
#include "cpu/flash/engines.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

struct DecodeScratch {
  float* q;  // heads x kDecodeMaxRows x Dp, row-major
  float* merged;
  float* scores;   // heads x kDecodeMaxRows x kDecodeBlock: the block's scores, then its probabilities
  float* part;     // heads x kDecodeMaxRows x 16 keys x 16 lanes: partial sums of q . k
  float* acc;      // heads x kDecodeMaxRows x Dp: the rows' accumulators, 64-byte aligned (the partials
                   // they are copied to at the end need not be)
  int64_t* k_off;  // heads x kDecodeBlock: the key block's element offsets
  int64_t* v_off;
};

DecodeScratch carve(const AttnCall& c, int64_t heads, Carver& mem) {
  const int64_t Dp = strips_of(c.head_dim) * kLanes;
  DecodeScratch s;
  s.q = mem.take(heads * kDecodeMaxRows * Dp);
  s.merged = mem.take(Dp);
  s.scores = mem.take(heads * kDecodeMaxRows * kDecodeBlock);
  s.part = mem.take(heads * kDecodeMaxRows * kLanes * kLanes);
  s.acc = mem.take(heads * kDecodeMaxRows * Dp);
  s.k_off = mem.take_i64(heads * kDecodeBlock);
  s.v_off = mem.take_i64(heads * kDecodeBlock);
  return s;
}

// The head dim is walked in chunks of at most kChunkStrips strips, the last one of NS strips (its last
// strip holding dim % 16 elements when Tail), all compile-time so that every load has a constant
// displacement from its key row (with a run-time strip count the compiler kept offsets in spilled
// registers).
constexpr int kChunkStrips = 8;

// `partial` is a constant once the strip loops are unrolled.
template <DType DT>
FLASH_INLINE VecF load_strip(const void* base, int64_t off, bool partial, int dim) {
  return partial ? load_n<DT>(base, off, dim % kLanes) : load16<DT>(base, off);
}

template <DType DT, int NS, bool Tail>
FLASH_INLINE VecF dot_chunk(const float* q, const void* k, int64_t off, int dim, VecF acc) {
  for (int t = 0; t < NS; ++t)
    acc = fma(load(q + t * kLanes), load_strip<DT>(k, off + t * kLanes, Tail && t == NS - 1, dim), acc);
  return acc;
}

// The 16 lane partial sums of q . k for the key row at element offset `off`: one FMA chain over head
// dim, in the order of the strips (the chains of consecutive keys, heads and rows are independent). The
// chunks advance pointers instead of indexing by chunk: with (chunks + t) * 16 offsets the compiler
// hoisted them out of the callers' loops into spilled registers.
template <DType DT, int NS, bool Tail>
FLASH_INLINE VecF dot_partial(const float* q, const void* k, int64_t off, int64_t full_chunks, int dim) {
  VecF acc = zeros();
  for (int64_t c = full_chunks; c > 0; --c, q += kChunkStrips * kLanes, off += kChunkStrips * kLanes)
    acc = dot_chunk<DT, kChunkStrips, false>(q, k, off, dim, acc);
  return dot_chunk<DT, NS, Tail>(q, k, off, dim, acc);
}

template <DType DT, int NS, bool Tail>
FLASH_INLINE void pv_chunk(float* acc, VecF p, const void* v, int64_t off, int dim) {
  for (int t = 0; t < NS; ++t)
    store(acc + t * kLanes,
          fma(p, load_strip<DT>(v, off + t * kLanes, Tail && t == NS - 1, dim), load(acc + t * kLanes)));
}

// acc += p V_j for the value row at element offset `off`.
template <DType DT, int NS, bool Tail>
FLASH_INLINE void pv_key(float* acc, float p, const void* v, int64_t off, int64_t full_chunks, int dim) {
  const VecF pv = splat(p);
  for (int64_t c = full_chunks; c > 0; --c, acc += kChunkStrips * kLanes, off += kChunkStrips * kLanes)
    pv_chunk<DT, kChunkStrips, false>(acc, pv, v, off, dim);
  pv_chunk<DT, NS, Tail>(acc, pv, v, off, dim);
}

struct DecodeRow {
  int64_t i, h, key_begin, key_end, diagonal;
  float slope2;
};

// Scores of one row for the 16 keys [j, j + 16) from their lane partial sums `part` (16 x 16), in log2
// units with softcap, ALiBi and the mask applied. `full`: the row sees all 16 keys (no mask needed).
FLASH_INLINE VecF score16(const AttnCall& c, const DecodeRow& row, const float* part, int64_t j, bool full) {
  static constexpr uint32_t kIota[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  VecF lanes[kLanes];
  for (int t = 0; t < kLanes; ++t) lanes[t] = load(part + t * kLanes);
  VecF x = transpose_sum16(lanes);
  if (!c.softcap() && !c.alibi() && full) return x;
  const VecU key = splat_u(uint32_t(j)) + load(kIota);
  if (c.softcap()) x = tanh(x) * splat(c.cap2);
  if (c.alibi()) x = x - splat(row.slope2) * abs_to_float(splat_u(uint32_t(row.diagonal)) - key);
  // Lanes past the block lie past key_end (or past the keys of this pass): masked like invisible keys.
  const LaneMask seen =
      LaneMask(~less_i(key, splat_u(uint32_t(row.key_begin))) & less_i(key, splat_u(uint32_t(row.key_end))));
  return select(seen, x, neg_infinity());
}

// One row's online-softmax step over the key block [j0, j0 + n): `x` holds its scores (padded to a
// multiple of 16 with -inf) and gets its probabilities. Updates (m, l); returns the factor that rescales
// the row's accumulator.
float softmax_block(const AttnCall& c, const AttnSeq& s, const DecodeRow& row, int64_t j0, int64_t n, float* x,
                    float* m, float* l) {
  const int64_t subs = strips_of(n);
  VecF block_max = neg_infinity();
  for (int64_t b = 0; b < subs; ++b) block_max = max(block_max, load(x + b * kLanes));
  // m stays -inf until a finite score is seen (std::max keeps its first operand against a NaN); then 0 is
  // subtracted instead, as in the tiled engine, so that exp2 gives 0 for -inf scores and NaN for NaN ones.
  const float m_new = std::max(*m, reduce_max(block_max));
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = std::exp2(*m - m_use);
  const uint32_t threshold = dropout_threshold(c.dropout.p);
  VecF sum = zeros();
  for (int64_t b = 0; b < subs; ++b) {
    VecF p = exp2(load(x + b * kLanes) - splat(m_use));
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
    store(x + b * kLanes, p);
  }
  *l = *l * alpha + reduce_add(sum);
  *m = m_new;
  return alpha;
}

// A row the block's phases visit: its query, lane partial sums, scores (then probabilities), accumulator,
// and where its key and value rows are.
struct RowTask {
  const float* q;
  float* part;
  float* scores;
  float* acc;
  const void* k;
  const void* v;
  const int64_t* k_off;
  const int64_t* v_off;
  const DecodeRow* row;
  const AttnSeq* seq;
  float* m;
  float* l;
};

template <typename S, int NS, bool Tail>
void attend_decode_impl(const AttnCall& c, const AttnSeq* seqs, int64_t heads, int64_t k0, int64_t k1,
                        const DecodePartial* out, float* scratch) {
  const int64_t D = c.head_dim, Dp = strips_of(D) * kLanes, R = seqs[0].rows(c);
  const int dim = int(D);
  const int64_t full_chunks = (strips_of(D) - NS) / kChunkStrips;
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
      load_query<S::q>(c, s, row.i, row.h, w.q + (hd * kDecodeMaxRows + r) * Dp);
      float* acc = w.acc + (hd * kDecodeMaxRows + r) * Dp;
      std::fill(acc, acc + Dp, 0.0f);
      out[hd].m[r] = -INFINITY;
      out[hd].l[r] = 0.0f;
    }
  }

  RowTask tasks[kDecodeMaxHeads * kDecodeMaxRows];
  for (int64_t j0 = lo; j0 < hi; j0 += kDecodeBlock) {
    const int64_t n = std::min(kDecodeBlock, hi - j0);
    int64_t count = 0;
    for (int64_t hd = 0; hd < heads; ++hd) {
      int64_t* k_off = w.k_off + hd * kDecodeBlock;
      int64_t* v_off = w.v_off + hd * kDecodeBlock;
      seqs[hd].keys.offsets(j0, n, k_off, v_off);
      for (int64_t r = 0; r < R; ++r) {
        if (rows[hd][r].key_end <= j0 || rows[hd][r].key_begin >= j0 + n) continue;
        const int64_t slot = hd * kDecodeMaxRows + r;
        tasks[count++] = RowTask{w.q + slot * Dp,
                                 w.part + slot * kLanes * kLanes,
                                 w.scores + slot * kDecodeBlock,
                                 w.acc + slot * Dp,
                                 seqs[hd].keys.k,
                                 seqs[hd].keys.v,
                                 k_off,
                                 v_off,
                                 &rows[hd][r],
                                 &seqs[hd],
                                 out[hd].m + r,
                                 out[hd].l + r};
      }
    }
    // S, 16 keys at a time: per key the rows of every head.
    for (int64_t g = 0; g < n; g += kLanes) {
      const int64_t m = std::min<int64_t>(kLanes, n - g);
      for (int64_t j = g; j < g + m; ++j)
        for (int64_t t = 0; t < count; ++t) {
          const RowTask& a = tasks[t];
          store(a.part + (j - g) * kLanes, dot_partial<S::kv, NS, Tail>(a.q, a.k, a.k_off[j], full_chunks, dim));
        }
      for (int64_t t = 0; t < count; ++t) {
        const RowTask& a = tasks[t];
        // The lanes of keys past the block are masked; zeros keep them defined.
        if (m < kLanes) std::fill(a.part + m * kLanes, a.part + kLanes * kLanes, 0.0f);
        const bool full = a.row->key_begin <= j0 + g && j0 + g + kLanes <= a.row->key_end;
        store(a.scores + g, score16(c, *a.row, a.part, j0 + g, full));
      }
    }
    for (int64_t t = 0; t < count; ++t) {
      const RowTask& a = tasks[t];
      const float alpha = softmax_block(c, *a.seq, *a.row, j0, n, a.scores, a.m, a.l);
      for (int64_t d = 0; d < Dp; d += kLanes) store(a.acc + d, load(a.acc + d) * splat(alpha));
    }
    // P V: per key the rows of every head.
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < count; ++t) {
        const RowTask& a = tasks[t];
        pv_key<S::kv, NS, Tail>(a.acc, a.scores[j], a.v, a.v_off[j], full_chunks, dim);
      }
  }
  for (int64_t hd = 0; hd < heads; ++hd)
    for (int64_t r = 0; r < R; ++r) {
      const float* acc = w.acc + (hd * kDecodeMaxRows + r) * Dp;
      std::copy(acc, acc + Dp, out[hd].acc + r * out[hd].acc_stride);
    }
}

template <typename S>
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
    write_output_row<S::out>(c, s, r / c.group, s.hk * c.group + r % c.group, w.merged, m, l);
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
  // Instances for one storage type, or an FP8 cache beside 16/32-bit queries (FP8 queries take the tiled
  // engine: attend_all).
  dispatch_storage(c.dtype, c.kv_dtype, [&](auto storage) {
    using S = decltype(storage);
    if constexpr (S::q != DType::fp8_e4m3) {
      // The engine's instance for the last head-dim chunk: NS = 1..kChunkStrips strips, the last one
      // partial when head_dim % 16 != 0.
      const int ns = int((strips_of(c.head_dim) - 1) % kChunkStrips + 1);
      const bool tail = c.head_dim % kLanes != 0;
      [&]<int... I>(std::integer_sequence<int, I...>) {
        ((ns == I + 1 ? (tail ? attend_decode_impl<S, I + 1, true>(c, seqs, heads, k0, k1, out, scratch)
                              : attend_decode_impl<S, I + 1, false>(c, seqs, heads, k0, k1, out, scratch))
                      : void()),
         ...);
      }
      (std::make_integer_sequence<int, kChunkStrips>{});
    }
  });
}

void finish_decode(const AttnCall& c, const AttnSeq& s, const DecodePartial* parts, int64_t n, float* scratch) {
  dispatch_storage(c.dtype, c.kv_dtype, [&](auto storage) {
    using S = decltype(storage);
    if constexpr (S::q != DType::fp8_e4m3) finish_decode_impl<S>(c, s, parts, n, scratch);
  });
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
