#pragma once

// The normalised description of one attention call that every backend reads. It is built once, after
// validation, by src/api/ from the user's FwdParams/BwdParams/KVCacheParams: shapes resolved, defaults
// applied (softmax scale, causal -> right window 0), pointers and element strides flattened so that the
// dense (B, S, H, D) and varlen (total, H, D) layouts are addressed the same way.

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "flashattn/tensor.h"

namespace flashattn::detail {

// Element (b, i, h, d) of a q/k/v/out-like tensor lives at
//   ptr + b * batch_stride + (row_start(b) + i) * row_stride + h * head_stride + d
// where row_start(b) is cu_seqlens[b] for varlen tensors (batch_stride == 0) and 0 for dense ones.
struct RowsView {
  void* ptr = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t head_stride = 0;

  FA_HD int64_t offset(int64_t b, int64_t row, int64_t h) const {
    return b * batch_stride + row * row_stride + h * head_stride;
  }
};

// fp32 log-sum-exp: element (b, h, i) at ptr + b * batch_stride + h * head_stride + row_start_q(b) + i.
struct LseView {
  float* ptr = nullptr;  // nullptr when the caller did not ask for it (forward only)
  int64_t batch_stride = 0;
  int64_t head_stride = 0;

  FA_HD int64_t offset(int64_t b, int64_t row, int64_t h) const { return b * batch_stride + h * head_stride + row; }
};

// FP8 inputs (q, k, v in fp8_e4m3): the fp32 factors that turn stored values into real ones, one per
// (batch, kv head) (flash-attn 3's q_descale / k_descale / v_descale: q's factor of query head h is that of
// its kv head h / group); absent: 1.
struct DescaleView {
  const float* ptr = nullptr;
  int64_t batch_stride = 0, head_stride = 0;

  FA_HD float at(int64_t b, int64_t hk) const { return ptr ? ptr[b * batch_stride + hk * head_stride] : 1.0f; }
};

// The logits transform and mask of one call, shared by every backend (see common/score.h).
struct ScoreParams {
  float softmax_scale = 1.0f;
  float softcap = 0.0f;                 // 0: off
  bool causal = false;                  // informational: causal is already folded into window_right = 0
  int64_t window_left = -1;             // < 0: unbounded
  int64_t window_right = -1;            // < 0: unbounded
  const float* alibi_slopes = nullptr;  // on the call's device
  int64_t alibi_batch_stride = 0;       // 0 when slopes are (H)
};

struct DropoutParams {
  float p = 0.0f;  // probability of dropping; 0: off
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Paged K/V of a varlen forward: key j of sequence b lives in block
// block_table[b * block_table_stride + j / page_size], row j % page_size; the k/v RowsViews' batch_stride is
// then the stride between blocks.
struct PagedKeys {
  const int32_t* block_table = nullptr;  // nullptr: K/V are not paged
  int64_t block_table_stride = 0;
  int64_t page_size = 0;
  int64_t num_blocks = 0;
  int64_t capacity = 0;  // max_blocks_per_seq * page_size: keys a sequence can address
};

struct FwdProblem {
  DType dtype = DType::f32;  // of q, k and v; out's is out_dtype()
  Device device{};
  int64_t batch = 0, heads = 0, heads_k = 0, head_dim = 0;
  // Dense: the sequence lengths. Varlen: upper bounds (max_seqlen_q/k); exact lengths come from cu_seqlens.
  int64_t seqlen_q = 0, seqlen_k = 0;
  const int32_t* cu_seqlens_q = nullptr;  // (batch + 1) on the call's device; nullptr when dense
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0, total_k = 0;  // rows of q and k (batch * seqlen when dense)
  RowsView q, k, v, out;
  LseView lse;
  ScoreParams score;
  DropoutParams dropout;
  PagedKeys paged;                              // varlen forward only
  const int32_t* seqused_k = nullptr;           // varlen forward only: (batch) keys per sequence, or nullptr
  DescaleView q_descale, k_descale, v_descale;  // fp8_e4m3 inputs only

  bool varlen() const { return cu_seqlens_q != nullptr; }
  bool paged_kv() const { return paged.block_table != nullptr; }
  // FP8 attention (fp8_e4m3 inputs) writes bf16; otherwise out has the inputs' dtype.
  DType out_dtype() const { return dtype == DType::fp8_e4m3 ? DType::bf16 : dtype; }
  // Query heads per kv head; 1 for a call with no heads at all (heads = heads_k = 0, an empty call that a
  // forced backend's capability check still sees).
  int64_t group_size() const { return heads_k > 0 ? heads / heads_k : 1; }
};

struct BwdProblem : FwdProblem {
  RowsView dout, dq, dk, dv;
  bool deterministic = false;
};

// The cache of a KV-cache call. Contiguous: element (c, pos, h, d) at
// ptr + c * batch_stride + pos * row_stride + h * head_stride + d, c = cache_batch_idx[b] or b.
// Paged: position pos of sequence b lives in block block_table[b * block_table_stride + pos / page_size],
// row pos % page_size, and batch_stride is the stride between blocks.
struct CacheView {
  void* k = nullptr;
  void* v = nullptr;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t capacity = 0;  // positions per sequence: Sc, or max_blocks * page_size when paged
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int64_t page_size = 0;   // 0 when not paged
  int64_t num_blocks = 0;  // paged only
  int64_t batches = 0;     // Bc, contiguous only

  FA_HD bool paged() const { return block_table != nullptr; }
};

struct RotaryParams {
  const void* cos = nullptr;  // (rotary_seqlen, dim / 2), same dtype as q; nullptr: no rotary
  const void* sin = nullptr;
  int64_t cos_row_stride = 0, sin_row_stride = 0;
  int64_t dim = 0;  // rotary_dim, even, <= head_dim
  int64_t seqlen = 0;
  bool interleaved = true;
};

struct KVCacheProblem {
  DType dtype = DType::f32;        // of q, k_new, v_new and out
  DType cache_dtype = DType::f32;  // of k_cache and v_cache: dtype, or fp8_e4m3 (then the descales apply)
  DescaleView k_descale, v_descale;
  Device device{};
  int64_t batch = 0, heads = 0, heads_k = 0, head_dim = 0;
  int64_t seqlen_q = 0;
  int64_t seqlen_new = 0;  // rows of k_new/v_new; 0 when nothing is appended
  RowsView q, out, k_new, v_new;
  LseView lse;
  CacheView cache;
  const int32_t* cache_seqlens = nullptr;  // (batch) on the call's device, or nullptr -> scalar below
  int64_t cache_seqlens_scalar = 0;
  const int32_t* cache_batch_idx = nullptr;
  const int32_t* cache_leftpad = nullptr;
  RotaryParams rotary;
  ScoreParams score;
  int num_splits = 0;
  // The caller's workspace allocator (KVCacheParams::workspace_allocator), or null: the backend then
  // allocates stream-ordered memory. A plain function and its context, so that the problem stays a
  // trivially copyable kernel parameter; valid for the duration of the call.
  void* (*workspace_allocator)(size_t bytes, void* context) = nullptr;
  void* workspace_context = nullptr;

  int64_t group_size() const { return heads_k > 0 ? heads / heads_k : 1; }  // as FwdProblem's
};

}  // namespace flashattn::detail
