#pragma once

// One fuzzed call of the C API: which entry point, the scalar arguments, and every tensor argument with
// its own exactly-sized memory. A call can be copied (deep) so that two backends run on identical inputs.

#include <cstdint>
#include <string>

#include "byte_reader.h"
#include "flashattn/flashattn_c.h"
#include "fuzz_tensor.h"

namespace fa_fuzz {

enum class Op : uint8_t { forward, backward, kvcache };

enum Slot : int {
  kQ,
  kK,
  kV,
  kOut,
  kLse,
  kCuQ,
  kCuK,
  kAlibi,  // forward (and the forward part of backward)
  kDout,
  kDq,
  kDk,
  kDv,  // backward
  kKCache,
  kVCache,
  kKNew,
  kVNew,
  kCacheSeqlens,
  kBatchIdx,
  kLeftpad,
  kBlockTable,
  kRotaryCos,
  kRotarySin,
  kSlots
};

const char* slot_name(int slot);

struct FuzzCall {
  Op op = Op::forward;
  // Backend as the caller names it: nullptr and "" pick automatically.
  bool backend_null = false;
  std::string backend = "cpu_flash";
  // Scalar arguments; their tensor fields are filled from `tensors` by bind().
  flashattn_bwd_params bwd{};  // forward calls use bwd.fwd
  flashattn_kvcache_params kv{};
  FuzzTensor tensors[kSlots];
  // Estimated multiply-adds of one run; calls above the fuzzer's budget are only validated.
  int64_t cost = 0;

  // Whether `slot` is written by this call (outputs, and the caches when new tokens are appended).
  bool writes(int slot) const;
  // Runs the call through the C API on this call's memory and returns the status. `backend_override`
  // replaces the decoded backend when not null.
  int run(const char* backend_override = nullptr);
};

// Decodes one call from the fuzzer's bytes; an empty input gives a small valid forward call.
FuzzCall decode_call(ByteReader& r);

// Every argument of the call in readable form (printed when a check fails).
std::string describe(const FuzzCall& call);

}  // namespace fa_fuzz
