#pragma once

// Runtime dtype -> compile-time storage type, done once at each backend's launch code. The callable
// receives a TypeTag<T> and reads the type back with `typename decltype(tag)::type`.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "flashattn/error.h"
#include "flashattn/tensor.h"

namespace flashattn::detail::cuda {

template <typename T>
struct TypeTag {
  using type = T;
};

// True for the storage dtypes the CUDA kernels are instantiated for.
inline bool is_kernel_dtype(DType dt) { return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16; }

// Calls f(TypeTag<T>{}) with the storage type of dt: f16, bf16 and, unless kWithF32 is false (the
// tensor-core kernels, which have no f32 instances to reference), f32. Any other dtype is a bug of the
// caller's supports_* (an internal error).
template <bool kWithF32 = true, typename F>
void dispatch_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::f32:
      if constexpr (kWithF32) {
        f(TypeTag<float>{});
        return;
      }
      break;
    case DType::f16:
      f(TypeTag<__half>{});
      return;
    case DType::bf16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    default:
      break;
  }
  throw Error(Status::internal,
              std::string("flashattn: CUDA kernel dispatch: dtype ") + dtype_name(dt) + " has no kernel");
}

}  // namespace flashattn::detail::cuda
