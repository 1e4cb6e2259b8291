// The C API: converts the C structs into the C++ params and every exception into a status code.

#include <cstring>
#include <new>
#include <string>

#include "flashattn/api.h"
#include "flashattn/flashattn_c.h"
#include "flashattn/version.h"

namespace {

thread_local std::string g_last_error;

flashattn::Tensor to_tensor(const flashattn_tensor& t, const char* name) {
  flashattn::Tensor out;
  if (t.ndim == 0) return out;
  if (t.ndim < 0 || t.ndim > flashattn::Tensor::kMaxDims)
    throw flashattn::Error(
        flashattn::Status::invalid_argument,
        std::string("flashattn C API: ") + name + ": expected ndim in [0, 4], got " + std::to_string(t.ndim));
  if (t.dtype < FLASHATTN_F32 || t.dtype > FLASHATTN_I32)
    throw flashattn::Error(
        flashattn::Status::invalid_argument,
        std::string("flashattn C API: ") + name + ": expected a dtype code in [0, 4], got " + std::to_string(t.dtype));
  if (t.device_type != FLASHATTN_CPU && t.device_type != FLASHATTN_CUDA)
    throw flashattn::Error(flashattn::Status::invalid_argument, std::string("flashattn C API: ") + name +
                                                                    ": expected device_type 0 (cpu) or 1 (cuda), got " +
                                                                    std::to_string(t.device_type));
  out.data = t.data;
  out.dtype = static_cast<flashattn::DType>(t.dtype);
  out.device = {static_cast<flashattn::DeviceType>(t.device_type), t.device_index};
  out.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    out.shape[i] = t.shape[i];
    out.stride[i] = t.stride[i];
  }
  return out;
}

flashattn::AttentionOptions to_options(const flashattn_options& o) {
  flashattn::AttentionOptions out;
  if (o.has_softmax_scale) out.softmax_scale = o.softmax_scale;
  out.causal = o.causal != 0;
  out.window_left = o.window_left;
  out.window_right = o.window_right;
  out.alibi_slopes = to_tensor(o.alibi_slopes, "alibi_slopes");
  out.softcap = o.softcap;
  if (o.backend) out.backend = o.backend;
  out.check_index_values = o.check_index_values != 0;
  return out;
}

void fill_fwd(flashattn::FwdParams& out, const flashattn_fwd_params& p) {
  out.q = to_tensor(p.q, "q");
  out.k = to_tensor(p.k, "k");
  out.v = to_tensor(p.v, "v");
  out.out = to_tensor(p.out, "out");
  out.softmax_lse = to_tensor(p.softmax_lse, "softmax_lse");
  out.cu_seqlens_q = to_tensor(p.cu_seqlens_q, "cu_seqlens_q");
  out.cu_seqlens_k = to_tensor(p.cu_seqlens_k, "cu_seqlens_k");
  out.max_seqlen_q = p.max_seqlen_q;
  out.max_seqlen_k = p.max_seqlen_k;
  out.options = to_options(p.options);
  out.dropout_p = p.dropout_p;
  out.seed = p.seed;
  out.offset = p.offset;
  out.block_table = to_tensor(p.block_table, "block_table");
  out.seqused_k = to_tensor(p.seqused_k, "seqused_k");
}

template <typename F>
int guarded(F&& f) {
  try {
    f();
    g_last_error.clear();
    return FLASHATTN_OK;
  } catch (const flashattn::Error& e) {
    g_last_error = e.what();
    return static_cast<int>(e.status());
  } catch (const std::bad_alloc&) {
    g_last_error = "flashattn: out of host memory";
    return FLASHATTN_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    g_last_error = std::string("flashattn: internal error: ") + e.what();
    return FLASHATTN_INTERNAL;
  } catch (...) {
    g_last_error = "flashattn: internal error: unknown exception";
    return FLASHATTN_INTERNAL;
  }
}

int null_arg(const char* fn) {
  g_last_error = std::string(fn) + ": p: expected a params pointer, got NULL";
  return FLASHATTN_INVALID_ARGUMENT;
}

void init_options(flashattn_options* o) {
  std::memset(o, 0, sizeof(*o));
  o->window_left = -1;
  o->window_right = -1;
}

}  // namespace

extern "C" {

void flashattn_fwd_params_init(flashattn_fwd_params* p) {
  if (!p) return;  // nothing to initialise (documented in flashattn_c.h)
  std::memset(p, 0, sizeof(*p));
  init_options(&p->options);
}

void flashattn_bwd_params_init(flashattn_bwd_params* p) {
  if (!p) return;  // nothing to initialise (documented in flashattn_c.h)
  std::memset(p, 0, sizeof(*p));
  flashattn_fwd_params_init(&p->fwd);
}

void flashattn_kvcache_params_init(flashattn_kvcache_params* p) {
  if (!p) return;  // nothing to initialise (documented in flashattn_c.h)
  std::memset(p, 0, sizeof(*p));
  init_options(&p->options);
  p->cache_seqlens_scalar = -1;
  p->rotary_interleaved = 1;
}

int flashattn_forward(const flashattn_fwd_params* p, void* stream) {
  if (!p) return null_arg("flashattn_forward");
  return guarded([&] {
    flashattn::FwdParams f;
    fill_fwd(f, *p);
    flashattn::forward(f, stream);
  });
}

int flashattn_backward(const flashattn_bwd_params* p, void* stream) {
  if (!p) return null_arg("flashattn_backward");
  return guarded([&] {
    flashattn::BwdParams b;
    fill_fwd(b, p->fwd);
    b.dout = to_tensor(p->dout, "dout");
    b.dq = to_tensor(p->dq, "dq");
    b.dk = to_tensor(p->dk, "dk");
    b.dv = to_tensor(p->dv, "dv");
    b.deterministic = p->deterministic != 0;
    flashattn::backward(b, stream);
  });
}

int flashattn_forward_kvcache(const flashattn_kvcache_params* p, void* stream) {
  if (!p) return null_arg("flashattn_forward_kvcache");
  return guarded([&] {
    flashattn::KVCacheParams k;
    k.q = to_tensor(p->q, "q");
    k.k_cache = to_tensor(p->k_cache, "k_cache");
    k.v_cache = to_tensor(p->v_cache, "v_cache");
    k.k_new = to_tensor(p->k_new, "k_new");
    k.v_new = to_tensor(p->v_new, "v_new");
    k.out = to_tensor(p->out, "out");
    k.softmax_lse = to_tensor(p->softmax_lse, "softmax_lse");
    k.cache_seqlens = to_tensor(p->cache_seqlens, "cache_seqlens");
    k.cache_batch_idx = to_tensor(p->cache_batch_idx, "cache_batch_idx");
    k.cache_leftpad = to_tensor(p->cache_leftpad, "cache_leftpad");
    k.block_table = to_tensor(p->block_table, "block_table");
    k.rotary_cos = to_tensor(p->rotary_cos, "rotary_cos");
    k.rotary_sin = to_tensor(p->rotary_sin, "rotary_sin");
    k.cache_seqlens_scalar = p->cache_seqlens_scalar;
    k.rotary_interleaved = p->rotary_interleaved != 0;
    k.options = to_options(p->options);
    k.num_splits = p->num_splits;
    if (p->workspace_alloc) {
      auto* alloc = p->workspace_alloc;
      void* context = p->workspace_alloc_context;
      k.workspace_allocator = [alloc, context](size_t bytes) { return alloc(bytes, context); };
    }
    flashattn::forward_kvcache(k, stream);
  });
}

const char* flashattn_last_error(void) { return g_last_error.c_str(); }

const char* flashattn_version(void) { return flashattn::version(); }

}  // extern "C"
