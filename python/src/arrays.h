#pragma once

// DLPack arrays as the bindings receive them, and their conversion to flashattn::Tensor views.
// Any framework that exports DLPack (torch, numpy, cupy, jax, ...) is accepted without a copy.

#include <nanobind/ndarray.h>

#include "flashattn/tensor.h"

namespace flashattn::python {

namespace nb = nanobind;

// Arrays the call only reads (read-only numpy arrays are accepted) and arrays it writes.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// A Tensor view of `a`: dtype, device (cpu or cuda:index), shape and strides in elements. An invalid
// array (the argument was None) gives an absent Tensor. Throws flashattn::Error(invalid_argument)
// naming `function` and `name` for an array of more than 4 dims, an unsupported dtype or device.
Tensor to_tensor(const InArray& a, const char* function, const char* name);
Tensor to_tensor(const OutArray& a, const char* function, const char* name);

}  // namespace flashattn::python
