#pragma once

// Runtime -> compile-time switch of the head-dim bucket for the launch files of the tiled kernels, the
// only place where a head dim becomes a template argument (the dtype's is common/dispatch.h's
// dispatch_dtype<false>): only the buckets of FLASHATTN_HEAD_DIMS are referenced, so pruned buckets are
// neither compiled nor linked.

#include <string>
#include <type_traits>
#include <utility>

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

// Calls f(std::integral_constant<int, kHeadDimBuckets[I]>{}) for the bucket equal to `bucket`, if compiled.
template <typename F, size_t... I>
bool call_bucket(int bucket, F& f, std::index_sequence<I...>) {
  return ((bucket == kHeadDimBuckets[I] && call_if_compiled<kHeadDimBuckets[I]>(f)) || ...);
}

// Calls f(std::integral_constant<int, bucket>{}) for a compiled head-dim bucket (of kHeadDimBuckets).
template <typename F>
void head_dim_switch(int bucket, F&& f) {
  constexpr size_t kBuckets = sizeof(kHeadDimBuckets) / sizeof(kHeadDimBuckets[0]);
  if (!call_bucket(bucket, f, std::make_index_sequence<kBuckets>{}))
    throw Error(Status::internal, "flashattn: CUDA kernel dispatch: head_dim bucket " + std::to_string(bucket) +
                                      " not compiled (supports_* should have refused it)");
}

}  // namespace flashattn::detail::cuda::attn
