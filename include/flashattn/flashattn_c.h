/* C API of flashattn for FFI users (ctypes, Rust, Julia, ...). Every function returns a status code
 * (FLASHATTN_OK == 0 on success, the values of flashattn::Status otherwise); on failure
 * flashattn_last_error() returns the message of the calling thread's last error. */
#ifndef FLASHATTN_C_H
#define FLASHATTN_C_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FLASHATTN_OK = 0,
  FLASHATTN_INVALID_ARGUMENT = 1,
  FLASHATTN_UNSUPPORTED = 2,
  FLASHATTN_DEVICE_ERROR = 3,
  FLASHATTN_OUT_OF_MEMORY = 4,
  FLASHATTN_INTERNAL = 5,
};

enum { FLASHATTN_F32 = 0, FLASHATTN_F16 = 1, FLASHATTN_BF16 = 2, FLASHATTN_FP8_E4M3 = 3, FLASHATTN_I32 = 4 };
enum { FLASHATTN_CPU = 0, FLASHATTN_CUDA = 1 };

/* A strided tensor view; ndim == 0 means absent. Strides are in elements. */
typedef struct flashattn_tensor {
  void* data;
  int32_t dtype;
  int32_t device_type;
  int32_t device_index;
  int32_t ndim;
  int64_t shape[4];
  int64_t stride[4];
} flashattn_tensor;

typedef struct flashattn_options {
  int32_t has_softmax_scale; /* 0: 1/sqrt(head_dim) */
  float softmax_scale;
  int32_t causal;
  int32_t window_left, window_right; /* -1: unbounded */
  flashattn_tensor alibi_slopes;
  float softcap;
  const char* backend; /* NULL or "": automatic */
  int32_t check_index_values; /* CUDA: validate index values on the device (AttentionOptions::check_index_values) */
} flashattn_options;

typedef struct flashattn_fwd_params {
  flashattn_tensor q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q, max_seqlen_k;
  flashattn_options options;
  float dropout_p;
  uint64_t seed, offset;
  /* Varlen forward only (FwdParams in params.h): paged K/V (k/v then (num_blocks, page_size, heads_k,
     head_dim), block_table int32 (batch, max_blocks_per_seq)) and per-sequence key counts (int32 (batch)).
     Absent (ndim 0) otherwise; backward refuses both. */
  flashattn_tensor block_table, seqused_k;
} flashattn_fwd_params;

typedef struct flashattn_bwd_params {
  flashattn_fwd_params fwd; /* out and softmax_lse are inputs here */
  flashattn_tensor dout, dq, dk, dv;
  int32_t deterministic;
} flashattn_bwd_params;

typedef struct flashattn_kvcache_params {
  flashattn_tensor q, k_cache, v_cache, k_new, v_new, out, softmax_lse;
  flashattn_tensor cache_seqlens, cache_batch_idx, cache_leftpad, block_table, rotary_cos, rotary_sin;
  int64_t cache_seqlens_scalar; /* used when cache_seqlens is absent; -1: whole cache */
  int32_t rotary_interleaved;
  flashattn_options options;
  int32_t num_splits;
  /* Optional scratch-memory source for the GPU kernels (KVCacheParams::workspace_allocator in api.h):
     called at most once per call as workspace_alloc(bytes, workspace_alloc_context); returns device
     memory valid for the call's work on its stream, or NULL to fail the call. NULL: the library allocates. */
  void* (*workspace_alloc)(size_t bytes, void* context);
  void* workspace_alloc_context;
} flashattn_kvcache_params;

/* Fill a params struct with the defaults (everything absent, windows -1, no dropout); a NULL p is ignored. */
void flashattn_fwd_params_init(flashattn_fwd_params* p);
void flashattn_bwd_params_init(flashattn_bwd_params* p);
void flashattn_kvcache_params_init(flashattn_kvcache_params* p);

int flashattn_forward(const flashattn_fwd_params* p, void* stream);
int flashattn_backward(const flashattn_bwd_params* p, void* stream);
int flashattn_forward_kvcache(const flashattn_kvcache_params* p, void* stream);

/* Message of the calling thread's last failed call ("" if none). Valid until the next call. */
const char* flashattn_last_error(void);
const char* flashattn_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_C_H */
