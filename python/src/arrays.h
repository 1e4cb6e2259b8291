#pragma once

// Array arguments as the bindings receive them, and their conversion to flashattn::Tensor views.
// A plain torch.Tensor is read through its attributes (torch_view.h); any other framework that exports
// DLPack or the buffer protocol (numpy, cupy, jax, ...) goes through nanobind's ndarray. Never a copy.

#include <nanobind/ndarray.h>

#include <utility>

#include "flashattn/tensor.h"
#include "torch_view.h"

namespace flashattn::python {

namespace nb = nanobind;

// One array argument: `view` when it was read directly from a torch.Tensor, else `array`, which keeps
// the exported DLPack tensor alive for the call (invalid for None).
template <bool Writable>
struct ArrayArg {
  using Array = std::conditional_t<Writable, nb::ndarray<>, nb::ndarray<nb::ro>>;
  Array array;
  Tensor view;
  bool direct = false;
};

// Arrays the call only reads (read-only numpy arrays are accepted) and arrays it writes.
using InArray = ArrayArg<false>;
using OutArray = ArrayArg<true>;

// A Tensor view of `a`: dtype, device (cpu or cuda:index), shape and strides in elements. None gives an
// absent Tensor. Throws flashattn::Error(invalid_argument) naming `function` and `name` for an array of
// more than 4 dims, an unsupported dtype or device.
Tensor to_tensor(const InArray& a, const char* function, const char* name);
Tensor to_tensor(const OutArray& a, const char* function, const char* name);

}  // namespace flashattn::python

namespace nanobind::detail {

// Accepts what nanobind's ndarray accepts (and None where the argument allows it), reading a plain
// torch.Tensor directly; anything else fails the overload as an ndarray argument would.
template <bool Writable>
struct type_caster<flashattn::python::ArrayArg<Writable>> {
  using Arg = flashattn::python::ArrayArg<Writable>;
  NB_TYPE_CASTER(Arg, const_name("ndarray"))

  bool from_python(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    value = Arg();
    if (!src.is_none() && flashattn::python::read_torch_view(src, value.view)) {
      value.direct = true;
      return true;
    }
    make_caster<typename Arg::Array> array;
    if (!array.from_python(src, flags, cleanup)) return false;
    value.array = std::move(array.value);
    return true;
  }
};

}  // namespace nanobind::detail
