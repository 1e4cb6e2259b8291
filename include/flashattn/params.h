#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "flashattn/tensor.h"

namespace flashattn {

// Options shared by every attention call. Semantics are those of flash-attn 2.8; see docs/semantics.md.
struct AttentionOptions {
  // Scale applied to q.k before the softmax; unset means 1/sqrt(head_dim).
  std::optional<float> softmax_scale;
  // Causal mask aligned to the bottom-right corner (query i sees keys j <= i + seqlen_k - seqlen_q).
  bool causal = false;
  // Sliding window (left, right); -1 means unbounded on that side. Query i sees keys
  // [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right]. causal forces right = 0.
  int window_left = -1;
  int window_right = -1;
  // Optional fp32 ALiBi slopes, (heads) or (batch, heads): adds -slope * |i + seqlen_k - seqlen_q - j|.
  Tensor alibi_slopes;
  // > 0: a score s becomes softcap * tanh(s / softcap) (applied after softmax_scale, before ALiBi).
  float softcap = 0.0f;
  // Name of the backend to use; empty picks the fastest one that supports the call.
  std::string backend;
  // CUDA calls: validate every index value (cu_seqlens, cache_seqlens, cache_batch_idx, cache_leftpad,
  // block_table) on the device before the attention and raise a named error (argument, batch, value),
  // at the cost of a small kernel and a stream synchronisation; refused during CUDA graph capture.
  // FLASHATTN_CHECK_INDEX_VALUES=1 turns it on for every call. Without it, bad values on a GPU are
  // clamped into the call's buffers (wrong rows, never out of bounds); CPU calls are always checked.
  // See docs/reliability.md.
  bool check_index_values = false;
};

// Forward of exact attention. Dense layout: q (B, Sq, H, D), k/v (B, Sk, Hk, D), out like q.
// Varlen layout (cu_seqlens_q/k present): q (total_q, H, D), k/v (total_k, Hk, D), or paged K/V (below).
// D is any head dim from 1 to 256.
struct FwdParams {
  Tensor q, k, v;
  Tensor out;                         // written: same shape and dtype as q (bf16 for fp8_e4m3 q)
  Tensor softmax_lse;                 // optional, written: fp32 (B, H, Sq) dense, (H, total_q) varlen; natural log
  Tensor cu_seqlens_q, cu_seqlens_k;  // int32 (B + 1), both or neither
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // varlen only: upper bounds of the per-sequence lengths
  AttentionOptions options;
  // Dropout on the attention probabilities with a counter-based RNG: the same (seed, offset) gives the
  // same keep mask on every backend, so backward replays it. Must be in [0, 1).
  float dropout_p = 0.0f;
  uint64_t seed = 0, offset = 0;
  // Varlen forward only (flash-attn's varlen_fwd): K/V read from a paged cache. k/v are then (num_blocks,
  // page_size, Hk, D), any page_size >= 1, and key j of sequence b is row j % page_size of block
  // block_table[b][j / page_size]; cu_seqlens_k then only gives the key counts. int32 (B, max_blocks).
  Tensor block_table;
  // Varlen forward only: int32 (B); when present, sequence b attends to its first seqused_k[b] keys instead
  // of cu_seqlens_k[b + 1] - cu_seqlens_k[b] (the masks align to that count), as flash-attn's and vLLM's.
  Tensor seqused_k;
  // FP8: q, k and v in fp8_e4m3 (all three), out in bf16. Optional fp32 (B, Hk) factors (any strides)
  // that turn each stored value into the real one, per batch entry and kv head, as flash-attn 3's
  // q_descale / k_descale / v_descale (query head h uses its kv head's q factor); absent means 1. Only
  // with fp8_e4m3 inputs; no dropout, no backward.
  Tensor q_descale, k_descale, v_descale;
};

// Backward. Reads q, k, v, out, softmax_lse (required) and dout; writes dq, dk, dv (like q, k, v).
// For GQA, dk/dv are summed over the query heads of each kv head. block_table and seqused_k must be absent
// (flash-attn has no backward for them either).
struct BwdParams : FwdParams {
  Tensor dout;
  Tensor dq, dk, dv;
  // Ask for bitwise reproducible gradients (every floating-point sum in the same order in every run).
  bool deterministic = false;
};

// Attention against a KV cache (flash_attn_with_kvcache).
//   q (B, Sq, H, D); k_cache/v_cache (Bc, Sc, Hk, D), or paged (num_blocks, page_size, Hk, D) with
//   block_table (B, max_blocks) int32 (any page_size >= 1).
//   Optional k_new/v_new (B, Sn, Hk, D) are written into the cache at cache_seqlens[b] before attending.
//   Optional rotary_cos/sin (Sro, rotary_dim / 2) rotate q and k_new (interleaved: pairs (2i, 2i+1);
//   otherwise NeoX halves) at absolute cache positions.
struct KVCacheParams {
  Tensor q;
  Tensor k_cache, v_cache;  // updated in place when k_new/v_new are given
  Tensor k_new, v_new;
  Tensor out;                         // written: like q
  Tensor softmax_lse;                 // optional, written: fp32 (B, H, Sq)
  Tensor cache_seqlens;               // int32 (B); absent means cache_seqlens_scalar for every sequence
  int64_t cache_seqlens_scalar = -1;  // used when cache_seqlens is absent; -1 means the whole cache
  Tensor cache_batch_idx;             // int32 (B): cache row of each batch entry (contiguous caches only)
  Tensor cache_leftpad;               // int32 (B): first valid cache position of each sequence
  Tensor block_table;                 // int32 (B, max_blocks): paged cache
  Tensor rotary_cos, rotary_sin;
  bool rotary_interleaved = true;
  // FP8 cache: k_cache and v_cache in fp8_e4m3 (both), q, k_new, v_new and out in f16/bf16/f32. Optional
  // fp32 (B, Hk) factors, any strides (flash-attn 3's names): the real key at a cache position is the
  // stored value x k_descale[b, hk] (v likewise); an appended row is stored as k_new / k_descale rounded
  // to e4m3 (nearest even, saturating at +-448). Absent means 1. Only with an fp8_e4m3 cache.
  Tensor k_descale, v_descale;
  AttentionOptions options;
  int num_splits = 0;  // split-KV hint for GPU decode kernels; 0 lets the backend choose
  // Where the call's GPU kernels get their scratch memory (split partials, q's rotated copy; docs/decode.md).
  // When set, the backend calls it at most once per call with the bytes it needs instead of allocating
  // stream-ordered memory (cudaMallocAsync) itself. It returns memory on the call's device that stays
  // valid for the call's work on `stream` (a framework's caching allocator for that stream gives exactly
  // this), or nullptr, which fails the call with Status::out_of_memory before anything is written. A
  // CUDA graph of a call so served holds no allocation nodes: on the H200 those cost ~1.4 us of a 17 us
  // batch-1 decode step. The Python package passes PyTorch's allocator.
  std::function<void*(size_t bytes)> workspace_allocator;
};

// Opaque stream handle: a cudaStream_t for CUDA tensors, ignored for CPU tensors. nullptr is the
// default (legacy) stream.
using Stream = void*;

}  // namespace flashattn
