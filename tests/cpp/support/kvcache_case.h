#pragma once

// KV-cache test cases: configuration, random inputs (cache, pages, new tokens, rotary tables), running
// forward_kvcache on any backend, and the oracle built from the reference's updated cache.

#include <functional>
#include <string>
#include <vector>

#include "attention_case.h"

namespace fa_test {

struct KVConfig {
  DType dtype = DType::f16;
  int64_t batch = 3, seqlen_q = 1, heads = 8, heads_k = 2, head_dim = 64;
  int64_t capacity = 96;               // positions per sequence (Sc, or max_blocks * page_size)
  int64_t page_size = 0;               // 0: contiguous cache
  std::vector<int64_t> cache_seqlens;  // before the append, one per sequence
  bool scalar_seqlens = false;         // pass cache_seqlens[0] as an int for every sequence
  int64_t seqlen_new = 0;              // tokens appended (k_new/v_new)
  bool batch_idx = false;              // cache rows permuted through cache_batch_idx
  bool leftpad = false;
  int64_t rotary_dim = 0;  // 0: no rotary
  bool rotary_interleaved = true;
  bool causal = false;
  int window_left = -1, window_right = -1;
  bool alibi = false;
  float softcap = 0.0f;
  int num_splits = 0;

  std::string name() const;
};

struct KVInputs {
  KVConfig cfg;
  HostTensor q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin, alibi;
  HostTensor cache_seqlens, cache_batch_idx, cache_leftpad, block_table;
  HostTensor k_descale, v_descale;  // FP8 caches: optional fp32 (batch, heads_k), never made by make_kv_inputs
};

KVInputs make_kv_inputs(const KVConfig& cfg, uint64_t seed);

struct KVOutputs {
  HostTensor out, lse, k_cache, v_cache;  // caches after the call
};

KVOutputs run_kvcache(const KVInputs& in, const std::string& backend, Device device,
                      flashattn::Stream stream = nullptr);
// run_kvcache with `call` in place of flashattn::forward_kvcache.
KVOutputs run_kvcache_via(const KVInputs& in, const std::string& backend, Device device,
                          const std::function<void(const flashattn::KVCacheParams&)>& call);

// The oracle: the reference's updated cache gathered into an equivalent varlen problem, with queries
// rotated in fp64; `naive` the same problem in the storage dtype.
struct KVOracle {
  KVOutputs appended;            // cpu_reference run in the storage dtype (cache contents oracle)
  std::vector<double> out, lse;  // fp64 oracle, in the layouts of KVOutputs
  std::vector<double> naive_out, naive_lse;
};
KVOracle kv_oracle(const KVInputs& in);

std::vector<KVConfig> kvcache_cases();

}  // namespace fa_test
