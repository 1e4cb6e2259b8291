#pragma once

// DLPack's C exchange API (DLPack 1.2+, "DLPackExchangeAPI"): a framework publishes, as the capsule
// `type(tensor).__dlpack_c_exchange_api__`, C functions that describe one of its tensors as a DLTensor
// without allocating anything, allocate a new tensor, and name the device's current work stream. torch
// publishes it from 2.10 on. It is a C ABI of DLPack, not torch's C++ ABI: this module stays free of both
// torch's headers and its libraries, and any framework that publishes the same capsule is served alike.
//
// Describing a tensor this way costs tens of nanoseconds, against ~1 us for reading its attributes from
// Python (torch_view.cpp, the fallback for a torch without the capsule) and ~3.5 us for __dlpack__.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>

#include "flashattn/tensor.h"

namespace flashattn::python {

struct ExchangeApi;  // the framework's function table (dlpack_exchange.cpp)

// The exchange API of `type` (a Python type) when the type is exactly torch.Tensor, or null: subclasses
// (parameters, fake and functional tensors) are left to the other paths, which look at them as Python
// objects. Never raises; the lookup is done once.
const ExchangeApi* exchange_api_of(nanobind::handle type) noexcept;

// read: `view` is filled. declined: the framework cannot describe `src`, or the library does not know its
// dtype or device (the DLPack path then says what is wrong). refused: `src` must not be read at all, by any
// path (a torch tensor with the negative bit, whose memory holds the negated values). No Python error is
// left set.
enum class ExchangeRead { read, declined, refused };
ExchangeRead read_exchange_view(const ExchangeApi* api, nanobind::handle src, Tensor& view) noexcept;

// A new tensor of the framework of `api`: contiguous, `dtype`, `shape` and the device of `like`. Returns the
// Python object (owning) and fills `view`; throws flashattn::Error(out_of_memory) naming `what` if the
// framework cannot allocate it.
nanobind::object exchange_empty(const ExchangeApi* api, const Tensor& like, DType dtype, int ndim, const int64_t* shape,
                                const char* what, Tensor& view);

// The framework's current work stream on `device` (a cudaStream_t as an integer; 0 for the CPU).
uintptr_t exchange_current_stream(const ExchangeApi* api, Device device);

// A scratch-memory source backed by the framework's allocator on `device`: each call returns a new uint8
// buffer that stays alive as long as the returned object. Called with the GIL released (it takes it).
struct ExchangeWorkspace {
  const ExchangeApi* api = nullptr;
  Device device;
  std::shared_ptr<void> buffer;  // the framework's tensor (a DLManagedTensorVersioned), freed by its deleter
  void* allocate(size_t bytes) noexcept;
};

}  // namespace flashattn::python
