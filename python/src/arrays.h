#pragma once

// Array arguments as the bindings receive them, and their conversion to flashattn::Tensor views.
// A plain torch.Tensor is read through its attributes (torch_view.h); any other framework that exports
// DLPack or the buffer protocol (numpy, cupy, jax, ...) goes through nanobind's ndarray. Never a copy.

#include <nanobind/ndarray.h>

#include <utility>

#include "dlpack_exchange.h"
#include "flashattn/tensor.h"
#include "torch_view.h"

namespace flashattn::python {

namespace nb = nanobind;

// How an array argument was read: DLPack's C exchange API (dlpack_exchange.h), a torch.Tensor's attributes
// (torch_view.h, for a torch without that API), or nanobind's ndarray (__dlpack__ or the buffer protocol).
enum class ReadVia { none, exchange, attributes, ndarray };

// One array argument: `view` when it was read directly from a torch.Tensor, else `array`, which keeps
// the exported DLPack tensor alive for the call (invalid for None). `exchange` is the framework's
// exchange API when the array was read through it (the call can then allocate outputs and find the
// current stream with the same framework).
template <bool Writable>
struct ArrayArg {
  using Array = std::conditional_t<Writable, nb::ndarray<>, nb::ndarray<nb::ro>>;
  Array array;
  Tensor view;
  bool direct = false;
  ReadVia via = ReadVia::none;
  const ExchangeApi* exchange = nullptr;

  bool present() const { return direct || array.is_valid(); }
};

// Arrays the call only reads (read-only numpy arrays are accepted) and arrays it writes.
using InArray = ArrayArg<false>;
using OutArray = ArrayArg<true>;

// The library's dtype and device for a DLPack dtype and device type/id; false for ones it does not know.
bool dlpack_dtype(nb::dlpack::dtype dt, DType& known);
bool dlpack_device(int type, int id, Device& known);

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
    using flashattn::python::ReadVia;
    value = Arg();
    if (src.is_none()) return make_caster<typename Arg::Array>().from_python(src, flags, cleanup);
    const flashattn::python::ExchangeApi* api = flashattn::python::exchange_api_of(src.type());
    if (api != nullptr) {
      const auto read = flashattn::python::read_exchange_view(api, src, value.view);
      if (read == flashattn::python::ExchangeRead::refused) return false;  // no overload matches: a TypeError
      if (read == flashattn::python::ExchangeRead::read) {
        value.direct = true;
        value.via = ReadVia::exchange;
        value.exchange = api;
        return true;
      }
    }
    if (flashattn::python::read_torch_view(src, value.view)) {
      value.direct = true;
      value.via = ReadVia::attributes;
      return true;
    }
    make_caster<typename Arg::Array> array;
    if (!array.from_python(src, flags, cleanup)) return false;
    value.array = std::move(array.value);
    value.via = ReadVia::ndarray;
    return true;
  }
};

}  // namespace nanobind::detail
