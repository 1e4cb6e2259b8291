#pragma once

// Runtime -> compile-time switches of the sm80 launch files, the only place where a runtime value
// becomes a template argument: the storage dtype (f16 / bf16) and the head-dim bucket (only the buckets
// of FLASHATTN_HEAD_DIMS are referenced, so pruned buckets are neither compiled nor linked).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "cuda/attn/head_dim.h"
#include "cuda/common/dispatch.h"
#include "flashattn/error.h"
#include "flashattn/tensor.h"

namespace flashattn::detail::cuda::attn {

// Calls f(TypeTag<__half>{}) or f(TypeTag<__nv_bfloat16>{}).
template <typename F>
void dtype_switch(DType dt, F&& f) {
  switch (dt) {
    case DType::f16:
      f(TypeTag<__half>{});
      return;
    case DType::bf16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    default:
      throw Error(Status::internal, std::string("flashattn: cuda_sm80 dispatch: dtype ") + dtype_name(dt) +
                                        " has no kernel (supports_* should have refused it)");
  }
}

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
    throw Error(Status::internal, "flashattn: cuda_sm80 dispatch: head_dim bucket " + std::to_string(bucket) +
                                      " not compiled (supports_* should have refused it)");
}

}  // namespace flashattn::detail::cuda::attn
