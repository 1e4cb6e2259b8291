#pragma once

// torch.Tensor arguments read through the tensor's own attributes instead of DLPack. torch's
// __dlpack__ is Python code that allocates a capsule, ~3.5 us a tensor: most of the host time of a small
// call with five to nine arrays. Reading data_ptr, dtype, device, shape and strides costs ~1 us.

#include <nanobind/nanobind.h>

#include "flashattn/tensor.h"

namespace flashattn::python {

// Fills `view` from `src` and returns true when `src` is a plain torch.Tensor (not a subclass) with the
// strided layout, no negative bit, 1 to 4 dims, on the CPU or a CUDA device and of a dtype the library
// knows. Returns false otherwise, with `view` untouched and no Python error set: such arrays take the
// DLPack path, whose messages say what is wrong with them.
bool read_torch_view(nanobind::handle src, Tensor& view) noexcept;

}  // namespace flashattn::python
