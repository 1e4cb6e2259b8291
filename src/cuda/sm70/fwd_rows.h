#pragma once

// Where the rows of one (sequence, query head) live for the sm70 forward kernel, for its two kinds of
// call: flash_attn_(varlen_)func (FwdArgs, rows from seq_range, keys through common/score.h's key_offset:
// paged K/V and seqused_k included) and flash_attn_with_kvcache (CacheArgs:
// keys from the cache through cache_batch_idx, leftpad and the block table, common/kvcache.h; queries
// from q or its rotated copy). fwd_kernel.cuh reads every row through these, so one kernel serves both.

#include <cuda_fp16.h>

#include <cstdint>

#include "api/problem.h"
#include "common/kvcache.h"
#include "common/score.h"
#include "cuda/attn/score_args.h"

namespace flashattn::detail::cuda::sm70 {

struct FwdArgs {
  FwdProblem p;
  attn::ScoreArgs s;
  int num_m_blocks = 0;  // query tiles per (sequence, head), from seqlen_q (max_seqlen_q when varlen)
};

struct CacheArgs {
  KVCacheProblem p;
  attn::ScoreArgs s;
  int num_m_blocks = 0;           // query tiles per (sequence, head)
  const __half* q_rot = nullptr;  // rotated q, contiguous (batch, seqlen_q, heads, head_dim); null: q
};

// The rows of sequence b, query head h (kv head hk) of a flash_attn_(varlen_)func call.
struct FwdRows {
  static constexpr bool kDropout = true;
  const FwdProblem& p;
  int64_t b, h, hk;
  SeqRange seq;

  FA_HD FwdRows(const FwdArgs& a, int64_t b_, int64_t h_)
      : p(a.p), b(b_), h(h_), hk(h_ / a.s.group), seq(seq_range(a.p, b_)) {}
  FA_HD int64_t sq() const { return seq.sq; }
  FA_HD int64_t sk() const { return seq.sk; }
  FA_HD const __half* q_row(int64_t i) const {
    return static_cast<const __half*>(p.q.ptr) + p.q.offset(b, seq.q_start + i, h);
  }
  // Paged K/V (flash_attn_varlen_func with block_table) through the block table, clamped to the pages.
  FA_HD const __half* k_row(int64_t j) const {
    return static_cast<const __half*>(p.k.ptr) + key_offset(p, p.k, seq, b, j, hk);
  }
  FA_HD const __half* v_row(int64_t j) const {
    return static_cast<const __half*>(p.v.ptr) + key_offset(p, p.v, seq, b, j, hk);
  }
  FA_HD __half* out_row(int64_t i) const {
    return static_cast<__half*>(p.out.ptr) + p.out.offset(b, seq.q_start + i, h);
  }
  FA_HD float* lse(int64_t i) const { return p.lse.ptr ? p.lse.ptr + p.lse.offset(b, seq.q_start + i, h) : nullptr; }
};

// The rows of sequence b, query head h of a flash_attn_with_kvcache call: key jj is cache position
// leftpad + jj (after the append kernel wrote the new tokens).
struct CacheRows {
  static constexpr bool kDropout = false;
  const KVCacheProblem& p;
  const __half* q_rot;
  int64_t b, h, hk;
  CacheSeq cs;

  FA_HD CacheRows(const CacheArgs& a, int64_t b_, int64_t h_)
      : p(a.p), q_rot(a.q_rot), b(b_), h(h_), hk(h_ / a.s.group), cs(cache_seq(a.p, b_)) {}
  FA_HD int64_t sq() const { return p.seqlen_q; }
  FA_HD int64_t sk() const { return cs.seqlen_k; }
  FA_HD const __half* q_row(int64_t i) const {
    if (q_rot) return q_rot + ((b * p.seqlen_q + i) * p.heads + h) * p.head_dim;
    return static_cast<const __half*>(p.q.ptr) + p.q.offset(b, i, h);
  }
  FA_HD const __half* k_row(int64_t j) const {
    return static_cast<const __half*>(p.cache.k) + cache_offset(p.cache, cs, b, cs.leftpad + j, hk, false);
  }
  FA_HD const __half* v_row(int64_t j) const {
    return static_cast<const __half*>(p.cache.v) + cache_offset(p.cache, cs, b, cs.leftpad + j, hk, true);
  }
  FA_HD __half* out_row(int64_t i) const { return static_cast<__half*>(p.out.ptr) + p.out.offset(b, i, h); }
  FA_HD float* lse(int64_t i) const { return p.lse.ptr ? p.lse.ptr + p.lse.offset(b, i, h) : nullptr; }
};

template <typename Args>
struct RowsOf;
template <>
struct RowsOf<FwdArgs> {
  using type = FwdRows;
};
template <>
struct RowsOf<CacheArgs> {
  using type = CacheRows;
};

}  // namespace flashattn::detail::cuda::sm70
