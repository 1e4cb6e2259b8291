#include "dlpack_exchange.h"

#include <cstring>
#include <string>

#include "arrays.h"
#include "flashattn/error.h"

namespace flashattn::python {

namespace nb = nanobind;

// The C structures of DLPack's exchange API (dlpack.h, DLPack 1.2), declared here from the specification so
// that no framework's header is needed. Only major version 1 is accepted.
namespace {

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

using DLTensor = nb::dlpack::dltensor;  // nanobind's declaration of DLPack's DLTensor, the same layout

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

using SetErrorFn = void (*)(void* error_ctx, const char* kind, const char* message);

struct ExchangeApiHeader {
  DLPackVersion version;
  ExchangeApiHeader* prev_api;
};

}  // namespace

struct ExchangeApi {
  ExchangeApiHeader header;
  int (*managed_tensor_allocator)(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                                  SetErrorFn set_error);
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, DLManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_current_stream);
};

namespace {

constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;

const ExchangeApi* lookup(nb::handle type) noexcept {
  PyObject* capsule = PyObject_GetAttrString(type.ptr(), "__dlpack_c_exchange_api__");
  if (capsule == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  auto* api = static_cast<const ExchangeApi*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
  Py_DECREF(capsule);  // the table itself lives as long as the process (the API's contract)
  if (api == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (api->header.version.major != 1 || api->dltensor_from_py_object_no_sync == nullptr) return nullptr;
  return api;
}

// The framework's error message, when an allocation failed, for flashattn's own error.
void record_error(void* error_ctx, const char* kind, const char* message) {
  *static_cast<std::string*>(error_ctx) = std::string(kind ? kind : "error") + ": " + (message ? message : "");
}

void release(DLManagedTensorVersioned* managed) {
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

// A contiguous DLTensor prototype of `dtype` and `shape` on `device`.
DLTensor prototype(DType dtype, int ndim, const int64_t* shape, Device device) {
  using Code = nb::dlpack::dtype_code;
  const bool cuda = device.type == DeviceType::cuda;
  DLTensor t;
  t.ndim = ndim;
  t.shape = const_cast<int64_t*>(shape);
  t.device = {cuda ? kDLCUDA : kDLCPU, cuda ? int32_t(device.index) : 0};
  switch (dtype) {
    case DType::f32:
      t.dtype = {uint8_t(Code::Float), 32, 1};
      break;
    case DType::f16:
      t.dtype = {uint8_t(Code::Float), 16, 1};
      break;
    case DType::bf16:
      t.dtype = {uint8_t(Code::Bfloat), 16, 1};
      break;
    case DType::fp8_e4m3:
      t.dtype = {uint8_t(Code::Float8_E4M3FN), 8, 1};
      break;
    case DType::i32:
      t.dtype = {uint8_t(Code::Int), 32, 1};
      break;
  }
  return t;
}

// An uninitialised buffer of the framework, or null with `error` set.
DLManagedTensorVersioned* allocate(const ExchangeApi* api, DLTensor proto, std::string& error) {
  DLManagedTensorVersioned* managed = nullptr;
  if (api->managed_tensor_allocator(&proto, &managed, &error, record_error) != 0 || managed == nullptr) {
    if (error.empty()) error = "the framework's allocator returned no tensor";
    return nullptr;
  }
  return managed;
}

bool fill_view(const DLTensor& dl, Tensor& view) {
  Tensor t;
  if (dl.ndim < 1 || dl.ndim > Tensor::kMaxDims) return false;
  if (!dlpack_dtype(dl.dtype, t.dtype) || !dlpack_device(dl.device.device_type, dl.device.device_id, t.device))
    return false;
  t.ndim = dl.ndim;
  int64_t contiguous_stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = dl.shape[i];
    // DLPack allows null strides for a compact row-major tensor.
    t.stride[i] = dl.strides != nullptr ? dl.strides[i] : contiguous_stride;
    contiguous_stride *= dl.shape[i];
  }
  t.data = static_cast<char*>(dl.data) + dl.byte_offset;
  view = t;
  return true;
}

}  // namespace

const ExchangeApi* exchange_api_of(nb::handle type) noexcept {
  // torch.Tensor, recognised by name until it has been seen once (importing torch for a numpy array would
  // be wrong), then by identity.
  static PyObject* torch_tensor = nullptr;
  static const ExchangeApi* api = nullptr;
  if (torch_tensor != nullptr) return type.ptr() == torch_tensor ? api : nullptr;
  PyObject* name = PyObject_GetAttrString(type.ptr(), "__qualname__");
  PyObject* module = PyObject_GetAttrString(type.ptr(), "__module__");
  const bool is_tensor = name != nullptr && module != nullptr && PyUnicode_Check(name) && PyUnicode_Check(module) &&
                         PyUnicode_CompareWithASCIIString(name, "Tensor") == 0 &&
                         PyUnicode_CompareWithASCIIString(module, "torch") == 0;
  Py_XDECREF(name);
  Py_XDECREF(module);
  PyErr_Clear();
  if (!is_tensor) return nullptr;
  torch_tensor = type.ptr();
  Py_INCREF(torch_tensor);  // kept for the identity test; torch.Tensor lives as long as the interpreter
  api = lookup(type);
  return api;
}

ExchangeRead read_exchange_view(const ExchangeApi* api, nb::handle src, Tensor& view) noexcept {
  DLTensor dl;
  if (api->dltensor_from_py_object_no_sync(src.ptr(), &dl) != 0) {
    PyErr_Clear();  // the DLPack path will explain what is wrong with this tensor
    return ExchangeRead::declined;
  }
  // A torch tensor with the negative bit (x.conj().imag, torch._neg_view) holds the negations of its values:
  // its DLTensor, and what torch's __dlpack__ exports too, describe the memory, not the values.
  static PyObject* const is_neg = PyUnicode_InternFromString("is_neg");  // kept for the process
  PyObject* negative = PyObject_CallMethodObjArgs(src.ptr(), is_neg, nullptr);
  const bool plain = negative == Py_False;
  Py_XDECREF(negative);
  PyErr_Clear();
  if (!plain) return ExchangeRead::refused;
  return fill_view(dl, view) ? ExchangeRead::read : ExchangeRead::declined;
}

nb::object exchange_empty(const ExchangeApi* api, const Tensor& like, DType dtype, int ndim, const int64_t* shape,
                          const char* what, Tensor& view) {
  std::string error;
  DLManagedTensorVersioned* managed = allocate(api, prototype(dtype, ndim, shape, like.device), error);
  if (managed == nullptr || !fill_view(managed->dl_tensor, view)) {
    release(managed);
    throw Error(Status::out_of_memory, std::string("flashattn: ") + what + ": the framework could not allocate it on " +
                                           device_name(like.device) + " (" + error + ")");
  }
  void* object = nullptr;
  if (api->managed_tensor_to_py_object_no_sync(managed, &object) != 0 || object == nullptr) {
    PyErr_Clear();
    release(managed);
    throw Error(Status::out_of_memory, std::string("flashattn: ") + what + ": the framework could not wrap its tensor");
  }
  return nb::steal(static_cast<PyObject*>(object));
}

uintptr_t exchange_current_stream(const ExchangeApi* api, Device device) {
  if (device.type != DeviceType::cuda || api->current_work_stream == nullptr) return 0;
  void* stream = nullptr;
  if (api->current_work_stream(kDLCUDA, int32_t(device.index), &stream) != 0) {
    PyErr_Clear();
    throw Error(Status::device_error,
                "flashattn: the framework did not name its current CUDA stream on " + device_name(device));
  }
  return reinterpret_cast<uintptr_t>(stream);
}

void* ExchangeWorkspace::allocate(size_t bytes) noexcept {
  nb::gil_scoped_acquire gil;  // the framework may report an error through Python
  const int64_t shape[1] = {int64_t(bytes)};
  DLTensor proto = prototype(DType::i32, 1, shape, device);
  proto.dtype = {uint8_t(nb::dlpack::dtype_code::UInt), 8, 1};
  std::string error;
  DLManagedTensorVersioned* managed = ::flashattn::python::allocate(api, proto, error);
  if (managed == nullptr) {
    PyErr_Clear();
    return nullptr;  // the call then fails with Status::out_of_memory
  }
  buffer = std::shared_ptr<void>(managed, [](void* m) { release(static_cast<DLManagedTensorVersioned*>(m)); });
  return static_cast<char*>(managed->dl_tensor.data) + managed->dl_tensor.byte_offset;
}

}  // namespace flashattn::python
