#pragma once

// What the cpu_flash attention engines (attend_tiled.cpp, attend_decode.cpp) need to know about one call
// and about one (sequence, kv head) of it. forward.cpp and kvcache.cpp translate their problems into
// these, so both share the engines.
//
// Rows are *packed* per kv head (GQA): packed row r of (sequence b, kv head hk) is query i = r / group of
// head h = hk * group + r % group. All heads of a group read the same K/V, so packing them into one tile
// converts each K/V tile once for the whole group and fills vector lanes even when seqlen_q is 1.

#include <cmath>
#include <cstdint>

#include "api/problem.h"
#include "common/kvcache.h"
#include "common/score.h"
#include "cpu/flash/convert_tile.h"
#include "cpu/flash/vec16.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

// Where key j (0-based among the keys attended) of one (sequence, kv head) lives: element offsets into the
// storage arrays k and v.
struct KeyRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_start = 0, v_start = 0;  // offset of key 0 (contiguous) or of the kv head (paged)
  int64_t k_row_stride = 0, v_row_stride = 0;
  // Paged cache: key j is cache position first + j, in block block_table[pos / page_size].
  const int32_t* block_table = nullptr;
  int64_t page_size = 0, first = 0;
  int64_t k_block_stride = 0, v_block_stride = 0;

  // Element offsets of keys [j0, j0 + n).
  void offsets(int64_t j0, int64_t n, int64_t* k_off, int64_t* v_off) const {
    if (!block_table) {
      for (int64_t t = 0; t < n; ++t) {
        k_off[t] = k_start + (j0 + t) * k_row_stride;
        v_off[t] = v_start + (j0 + t) * v_row_stride;
      }
      return;
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = first + j0 + t;
      const int64_t block = block_table[pos / page_size], row = pos % page_size;
      k_off[t] = k_start + block * k_block_stride + row * k_row_stride;
      v_off[t] = v_start + block * v_block_stride + row * v_row_stride;
    }
  }
};

// Constants of one call.
struct AttnCall {
  DType dtype = DType::f32;     // of q (and of out, but bf16 for fp8_e4m3 q: convert_tile.h's Storage)
  DType kv_dtype = DType::f32;  // of k and v: dtype, or fp8_e4m3 (the FP8 forward, an FP8 cache)
  int64_t heads = 0, head_dim = 0, group = 1;
  ScoreParams score;
  DropoutParams dropout;
  const RotaryParams* rotary = nullptr;  // forward_kvcache only
  // Scores are kept in log2 units so that the softmax uses exp2: q is multiplied by q_scale when packed,
  // softmax_scale * log2(e) without softcap; with softcap by softmax_scale / softcap, and the tanh of the
  // product is multiplied by cap2 = softcap * log2(e).
  float q_scale = 1.0f;
  float cap2 = 0.0f;
  float dropout_scale = 1.0f;  // 1 / (1 - p)

  bool softcap() const { return cap2 > 0.0f; }
  bool alibi() const { return score.alibi_slopes != nullptr; }
  bool dropout_on() const { return dropout.p > 0.0f; }
};

inline AttnCall make_call(DType dtype, int64_t heads, int64_t heads_k, int64_t head_dim, const ScoreParams& score,
                          const DropoutParams& dropout) {
  AttnCall c;
  c.dtype = c.kv_dtype = dtype;
  c.heads = heads;
  c.head_dim = head_dim;
  c.group = heads / heads_k;
  c.score = score;
  c.dropout = dropout;
  if (score.softcap > 0.0f) {
    c.q_scale = score.softmax_scale / score.softcap;
    c.cap2 = score.softcap * kLog2e;
  } else {
    c.q_scale = score.softmax_scale * kLog2e;
  }
  c.dropout_scale = dropout.p > 0.0f ? float(1.0 / (1.0 - double(dropout.p))) : 1.0f;
  return c;
}

// One (sequence, kv head).
struct AttnSeq {
  int64_t b = 0, hk = 0, sq = 0, sk = 0;
  // Element (i, h, 0) of q at offset q_start + i * q_row_stride + h * q_head_stride; out likewise.
  const void* q = nullptr;
  int64_t q_start = 0, q_row_stride = 0, q_head_stride = 0;
  void* out = nullptr;
  int64_t out_start = 0, out_row_stride = 0, out_head_stride = 0;
  float* lse = nullptr;  // (i, h) at lse + h * lse_head_stride + i; nullptr when not wanted
  int64_t lse_head_stride = 0;
  KeyRows keys;
  // forward_kvcache rotary: query i is rotated at rotary_pos0 (+ i when rotary_consecutive)
  int64_t rotary_pos0 = 0;
  bool rotary_consecutive = false;
  // FP8 descale factors of this (sequence, kv head), 1 otherwise: the scores' (q's times k's: the Q K^T
  // GEMM is linear, so they fold into the query's scale) and the output's (v's, into the normalisation).
  float score_factor = 1.0f;
  float out_factor = 1.0f;

  int64_t rows(const AttnCall& c) const { return c.group * sq; }
  Mask mask(const AttnCall& c) const { return make_mask(c.score, sq, sk); }
};

// Query row (i, h) in fp32 (rotated when the call has rotary) times `scale`, into dst[0, 16 *
// strips_of(head_dim)), zero-padded.
template <DType DT>
void load_query(const AttnCall& c, const AttnSeq& s, int64_t i, int64_t h, float* dst, float scale) {
  load_row<DT>(s.q, s.q_start + i * s.q_row_stride + h * s.q_head_stride, c.head_dim, dst);
  if (c.rotary && c.rotary->cos) {
    const RotaryParams& r = *c.rotary;
    const int64_t pos = s.rotary_pos0 + (s.rotary_consecutive ? i : 0);
    for (int64_t pair = 0; pair < r.dim / 2; ++pair) {
      const float cs = load_float(r.cos, pos * r.cos_row_stride + pair, DT);
      const float sn = load_float(r.sin, pos * r.sin_row_stride + pair, DT);
      int64_t i0, i1;
      rotary_pair(r, pair, &i0, &i1);
      const float x0 = dst[i0], x1 = dst[i1];
      dst[i0] = x0 * cs - x1 * sn;
      dst[i1] = x0 * sn + x1 * cs;
    }
  }
  for (int64_t d = 0; d < c.head_dim; d += kLanes) store(dst + d, load(dst + d) * splat(scale));
}

// The same times q_scale and the scores' factor (scores in log2 units straight out of the Q K^T GEMM).
template <DType DT>
void load_query(const AttnCall& c, const AttnSeq& s, int64_t i, int64_t h, float* dst) {
  load_query<DT>(c, s, i, h, dst, c.q_scale * s.score_factor);
}

// Writes one finished row (i, h): out = acc / l (times the dropout rescale), acc holding head_dim floats,
// and its LSE from the row max m (log2 units). l == 0 means the row saw no key: out is 0, the LSE +inf. A
// NaN l (a NaN logit) gives a NaN LSE, as the reference (docs/reliability.md): +inf would make the
// backward's P = exp(s - LSE) 0 and drop the NaN from dv.
template <DType DT>
void write_output_row(const AttnCall& c, const AttnSeq& s, int64_t i, int64_t h, const float* acc, float m, float l) {
  const int64_t off = s.out_start + i * s.out_row_stride + h * s.out_head_stride;
  store_row<DT>(s.out, off, acc, c.head_dim, l > 0.0f ? c.dropout_scale * s.out_factor / l : 0.0f);
  if (s.lse) s.lse[h * s.lse_head_stride + i] = l > 0.0f ? (m + std::log2(l)) * kLn2 : std::isnan(l) ? NAN : INFINITY;
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
