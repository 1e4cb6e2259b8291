#include "fuzz_call.h"

#include <sstream>

namespace fa_fuzz {

const char* slot_name(int slot) {
  static const char* const names[kSlots] = {"q",
                                            "k",
                                            "v",
                                            "out",
                                            "softmax_lse",
                                            "cu_seqlens_q",
                                            "cu_seqlens_k",
                                            "alibi_slopes",
                                            "dout",
                                            "dq",
                                            "dk",
                                            "dv",
                                            "k_cache",
                                            "v_cache",
                                            "k_new",
                                            "v_new",
                                            "cache_seqlens",
                                            "cache_batch_idx",
                                            "cache_leftpad",
                                            "block_table",
                                            "rotary_cos",
                                            "rotary_sin"};
  return slot >= 0 && slot < kSlots ? names[slot] : "?";
}

bool FuzzCall::writes(int slot) const {
  switch (op) {
    case Op::forward:
      return slot == kOut || slot == kLse;
    case Op::backward:
      return slot == kDq || slot == kDk || slot == kDv;
    case Op::kvcache:
      return slot == kOut || slot == kLse ||
             ((slot == kKCache || slot == kVCache) && (tensors[kKNew].present() || tensors[kVNew].present()));
  }
  return false;
}

int FuzzCall::run(const char* backend_override) {
  const char* name = backend_override ? backend_override : backend_null ? nullptr : backend.c_str();
  auto t = [&](int slot) { return tensors[slot].view(); };
  if (op == Op::kvcache) {
    kv.q = t(kQ);
    kv.k_cache = t(kKCache);
    kv.v_cache = t(kVCache);
    kv.k_new = t(kKNew);
    kv.v_new = t(kVNew);
    kv.out = t(kOut);
    kv.softmax_lse = t(kLse);
    kv.cache_seqlens = t(kCacheSeqlens);
    kv.cache_batch_idx = t(kBatchIdx);
    kv.cache_leftpad = t(kLeftpad);
    kv.block_table = t(kBlockTable);
    kv.rotary_cos = t(kRotaryCos);
    kv.rotary_sin = t(kRotarySin);
    kv.options.alibi_slopes = t(kAlibi);
    kv.options.backend = name;
    return flashattn_forward_kvcache(&kv, nullptr);
  }
  flashattn_fwd_params& f = bwd.fwd;
  f.q = t(kQ);
  f.k = t(kK);
  f.v = t(kV);
  f.out = t(kOut);
  f.softmax_lse = t(kLse);
  f.cu_seqlens_q = t(kCuQ);
  f.cu_seqlens_k = t(kCuK);
  f.options.alibi_slopes = t(kAlibi);
  f.options.backend = name;
  if (op == Op::forward) return flashattn_forward(&f, nullptr);
  bwd.dout = t(kDout);
  bwd.dq = t(kDq);
  bwd.dk = t(kDk);
  bwd.dv = t(kDv);
  return flashattn_backward(&bwd, nullptr);
}

namespace {

void describe_options(std::ostream& o, const flashattn_options& opt) {
  o << "causal " << opt.causal << ", window (" << opt.window_left << ", " << opt.window_right << "), softcap "
    << opt.softcap << ", softmax_scale " << (opt.has_softmax_scale ? std::to_string(opt.softmax_scale) : "default")
    << "\n";
}

}  // namespace

std::string describe(const FuzzCall& c) {
  std::ostringstream o;
  static const char* const ops[] = {"forward", "backward", "forward_kvcache"};
  o << ops[int(c.op)] << ", backend " << (c.backend_null ? "NULL" : "'" + c.backend + "'") << "\n";
  for (int s = 0; s < kSlots; ++s) {
    const FuzzTensor& t = c.tensors[s];
    if (!t.present()) continue;
    const flashattn_tensor& v = t.view();
    o << "  " << slot_name(s) << ": dtype " << v.dtype << " device " << v.device_type << ":" << v.device_index
      << " shape [";
    for (int d = 0; d < v.ndim && d < 4; ++d) o << (d ? ", " : "") << v.shape[d];
    o << "] stride [";
    for (int d = 0; d < v.ndim && d < 4; ++d) o << (d ? ", " : "") << v.stride[d];
    o << "]" << (t.unallocatable() ? " unallocatable" : "") << (v.data ? "" : " NULL");
    if (v.dtype == FLASHATTN_I32 && t.addressable()) {
      o << " values";
      for (int64_t i = 0; i < t.numel() && i < 64; ++i) o << " " << t.get_i32(i);
    }
    o << "\n";
  }
  if (c.op == Op::kvcache) {
    describe_options(o, c.kv.options);
    o << "  cache_seqlens_scalar " << c.kv.cache_seqlens_scalar << ", rotary_interleaved " << c.kv.rotary_interleaved
      << ", num_splits " << c.kv.num_splits << "\n";
  } else {
    describe_options(o, c.bwd.fwd.options);
    o << "  max_seqlen (" << c.bwd.fwd.max_seqlen_q << ", " << c.bwd.fwd.max_seqlen_k << "), dropout_p "
      << c.bwd.fwd.dropout_p << " seed " << c.bwd.fwd.seed << " offset " << c.bwd.fwd.offset << ", deterministic "
      << c.bwd.deterministic << "\n";
  }
  return o.str();
}

}  // namespace fa_fuzz
