#pragma once

// One benchmarked attention call: shapes, dtype, mask and score options, and which direction is timed.

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/tensor.h"

namespace fabench {

using flashattn::DType;

enum class Mode { fwd, bwd, fwdbwd };

const char* mode_name(Mode m);

struct BenchConfig {
  int64_t batch = 8, seqlen_q = 256, seqlen_k = 256, heads = 16, heads_k = 16, head_dim = 64;
  DType dtype = DType::f16;
  bool causal = false;
  int window_left = -1, window_right = -1;  // -1: unbounded on that side
  float softcap = 0.0f;
  float dropout = 0.0f;
  uint64_t dropout_seed = 2024, dropout_offset = 0;  // the same keep mask for every backend and the check
  Mode mode = Mode::fwd;
  bool deterministic = false;  // the backward's bitwise-repeatable mode

  bool has_backward() const { return mode != Mode::fwd; }
  // Same tensors (so the same random inputs serve both): everything but mask and score options.
  bool same_tensors(const BenchConfig& o) const;
  std::string describe() const;  // "B=8 Sq=256 Sk=256 H=16 Hk=16 D=64 f16 fwd causal"
};

// FlashAttention's benchmark convention: for each head dim D, hidden size 2048 (H = Hk = 2048 / D) and
// 16k tokens per batch (B = 16384 / S), each seqlen non-causal then causal. Everything else (dtype, mode,
// window, softcap, dropout) is taken from `base`.
std::vector<BenchConfig> sweep_configs(const BenchConfig& base, const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& seqlens);

}  // namespace fabench
