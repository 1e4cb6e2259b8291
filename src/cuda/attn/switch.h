#pragma once

// Runtime -> compile-time switch of the head-dim bucket for the launch files of the tiled kernels, the
// only place where a head dim becomes a template argument (the dtype's is common/dispatch.h's
// dispatch_dtype<false>): only the buckets of FLASHATTN_HEAD_DIMS are referenced, so pruned buckets are
// neither compiled nor linked.

#include <string>
#include <type_traits>

#include "cuda/attn/head_dim.h"
#include "cuda/common/dispatch.h"
#include "flashattn/error.h"
#include "flashattn/tensor.h"

namespace flashattn::detail::cuda::attn {

template <int kBucket, typename F>
bool call_if_compiled(F& f) {
  if constexpr (head_dim_compiled(kBucket)) {
    f(std::integral_constant<int, kBucket>{});
    return true;
  } else {
    return false;
  }
}

// Calls f(std::integral_constant<int, bucket>{}) for a compiled head-dim bucket.
template <typename F>
void head_dim_switch(int bucket, F&& f) {
  bool done = false;
  switch (bucket) {
    case 32:
      done = call_if_compiled<32>(f);
      break;
    case 64:
      done = call_if_compiled<64>(f);
      break;
    case 96:
      done = call_if_compiled<96>(f);
      break;
    case 128:
      done = call_if_compiled<128>(f);
      break;
    case 160:
      done = call_if_compiled<160>(f);
      break;
    case 192:
      done = call_if_compiled<192>(f);
      break;
    case 224:
      done = call_if_compiled<224>(f);
      break;
    case 256:
      done = call_if_compiled<256>(f);
      break;
    default:
      break;
  }
  if (!done)
    throw Error(Status::internal, "flashattn: CUDA kernel dispatch: head_dim bucket " + std::to_string(bucket) +
                                      " not compiled (supports_* should have refused it)");
}

}  // namespace flashattn::detail::cuda::attn
