#pragma once

// The attention semantics in one place, shared by CPU and CUDA backends:
//  * which keys a query sees (causal is "window with right = 0", aligned bottom-right), and
//  * how a raw dot product q.k becomes a logit (scale, softcap, ALiBi).

#include <cmath>
#include <cstdint>

#include "api/problem.h"
#include "common/host_device.h"
#include "common/index_bounds.h"

namespace flashattn::detail {

// Visibility of key j to query i in one sequence of sq queries and sk keys.
struct Mask {
  int64_t sq = 0, sk = 0;
  int64_t window_left = -1, window_right = -1;  // < 0: unbounded

  // The key aligned with query i: with sq != sk the last query lines up with the last key.
  FA_HD int64_t diagonal(int64_t i) const { return i + sk - sq; }
  // Visible keys of query i are [key_begin(i), key_end(i)); the range may be empty.
  FA_HD int64_t key_begin(int64_t i) const {
    if (window_left < 0) return 0;
    int64_t b = diagonal(i) - window_left;
    return b > 0 ? b : 0;
  }
  FA_HD int64_t key_end(int64_t i) const {
    if (window_right < 0) return sk;
    int64_t e = diagonal(i) + window_right + 1;
    return e < sk ? e : sk;
  }
  FA_HD bool visible(int64_t i, int64_t j) const { return j >= key_begin(i) && j < key_end(i); }
};

FA_HD Mask make_mask(const ScoreParams& s, int64_t sq, int64_t sk) {
  return Mask{sq, sk, s.window_left, s.window_right};
}

// Turns q.k into the logit fed to the softmax (natural-log units):
//   logit = softcap > 0 ? softcap * tanh(scale * qk / softcap) : scale * qk;  logit -= slope * |diag(i) - j|
template <typename T>
struct ScoreMod {
  T scale = 1, softcap = 0, slope = 0;

  FA_HD T operator()(T qk, int64_t distance) const {
    T s = qk * scale;
    if (softcap > 0) s = softcap * std::tanh(s / softcap);
    if (slope != 0) s -= slope * T(distance < 0 ? -distance : distance);
    return s;
  }
  // d logit / d qk, needed by backward: scale * (1 - tanh^2) with softcap, scale without.
  FA_HD T dlogit_dqk(T qk) const {
    if (softcap > 0) {
      T t = std::tanh(qk * scale / softcap);
      return scale * (T(1) - t * t);
    }
    return scale;
  }
};

// ALiBi slope of (batch b, head h); 0 when the call has none. `slopes` must be readable where this runs.
FA_HD float alibi_slope(const ScoreParams& s, int64_t b, int64_t h) {
  return s.alibi_slopes ? s.alibi_slopes[b * s.alibi_batch_stride + h] : 0.0f;
}

// Start row and length of sequence b of a (possibly varlen) problem. cu_seqlens must be readable where
// this runs (host for CPU problems, device for CUDA problems).
struct SeqRange {
  int64_t q_start = 0, sq = 0, k_start = 0, sk = 0;
};

// With seqused_k the sequence's key count is seqused_k[b]; with paged K/V its keys start at position 0 of
// its block table (key_offset below), so k_start is 0.
FA_HD SeqRange seq_range(const FwdProblem& p, int64_t b) {
  if (p.cu_seqlens_q == nullptr) return SeqRange{0, p.seqlen_q, 0, p.seqlen_k};
  // Every value is clamped to what the tensors can address (common/index_bounds.h): unchecked offsets on a
  // GPU stay in bounds.
  const PackedSpan q = packed_span(p.cu_seqlens_q[b], p.cu_seqlens_q[b + 1], p.total_q, p.seqlen_q);
  SeqRange r{q.start, q.len, 0, 0};
  if (p.paged.block_table) {
    r.sk = clamp_length(p.seqused_k ? p.seqused_k[b] : p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b], p.paged.capacity);
  } else {
    const PackedSpan k = packed_span(p.cu_seqlens_k[b], p.cu_seqlens_k[b + 1], p.total_k, p.seqlen_k);
    r.k_start = k.start;
    r.sk = p.seqused_k ? clamp_length(p.seqused_k[b], k.len) : k.len;
  }
  return r;
}

// Element offset of (key j of sequence b, kv head h, dim 0) in k or v (`kv`: p.k or p.v), r = seq_range(p, b).
FA_HD int64_t key_offset(const FwdProblem& p, const RowsView& kv, const SeqRange& r, int64_t b, int64_t j, int64_t h) {
  if (!p.paged.block_table) return kv.offset(b, r.k_start + j, h);
  const int64_t block = clamp_page(p.paged.block_table[b * p.paged.block_table_stride + j / p.paged.page_size],
                                   last_page_of(p.paged.num_blocks));
  return block * kv.batch_stride + (j % p.paged.page_size) * kv.row_stride + h * kv.head_stride;
}

}  // namespace flashattn::detail
