#include "torch_view.h"

#include <cstdint>
#include <cstring>

namespace flashattn::python {

namespace nb = nanobind;

namespace {

// The torch objects a view is compared with, looked up once, the first time a torch.Tensor is seen (torch
// is imported then). They are never released: torch's types and dtypes live as long as the interpreter.
struct TorchObjects {
  PyObject* tensor_type = nullptr;
  PyObject* strided = nullptr;
  PyObject* dtypes[5] = {};
  DType codes[5] = {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::i32};
};

const TorchObjects& torch_objects() {
  static const TorchObjects objects = [] {
    TorchObjects o;
    nb::module_ torch = nb::module_::import_("torch");
    o.tensor_type = nb::object(torch.attr("Tensor")).release().ptr();
    o.strided = nb::object(torch.attr("strided")).release().ptr();
    const char* names[5] = {"float32", "float16", "bfloat16", "float8_e4m3fn", "int32"};
    // A torch without float8 types (before 2.1) has no such attribute: None matches no tensor's dtype.
    for (int i = 0; i < 5; ++i) o.dtypes[i] = nb::getattr(torch, names[i], nb::none()).release().ptr();
    return o;
  }();
  return objects;
}

// Whether `type` is torch.Tensor itself, by name until torch's objects are known: importing torch here
// for a numpy array would be wrong.
bool is_torch_tensor_type(nb::handle type) {
  static PyObject* known = nullptr;
  if (known) return type.ptr() == known;
  if (std::strcmp(nb::type_name(type).c_str(), "torch.Tensor") != 0) return false;
  known = torch_objects().tensor_type;
  return type.ptr() == known;
}

bool read(nb::handle src, Tensor& view) {
  if (!is_torch_tensor_type(src.type())) return false;
  const TorchObjects& torch = torch_objects();
  if (!src.attr("layout").is(torch.strided) || nb::cast<bool>(src.attr("is_neg")())) return false;
  Tensor t;
  const nb::object dtype = src.attr("dtype");
  int found = -1;
  for (int i = 0; i < 5 && found < 0; ++i)
    if (dtype.ptr() == torch.dtypes[i]) found = i;
  if (found < 0) return false;
  t.dtype = torch.codes[found];
  if (nb::cast<bool>(src.attr("is_cuda")))
    t.device = Device::cuda(nb::cast<int>(src.attr("get_device")()));
  else if (nb::cast<bool>(src.attr("is_cpu")))
    t.device = Device::cpu();
  else
    return false;
  const nb::object shape = src.attr("shape");
  const nb::object stride = src.attr("stride")();
  const size_t ndim = nb::len(shape);
  if (ndim < 1 || ndim > size_t(Tensor::kMaxDims) || nb::len(stride) != ndim) return false;
  t.ndim = int(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    t.shape[i] = nb::cast<int64_t>(shape[i]);
    t.stride[i] = nb::cast<int64_t>(stride[i]);
  }
  t.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(src.attr("data_ptr")()));
  view = t;
  return true;
}

}  // namespace

bool read_torch_view(nb::handle src, Tensor& view) noexcept {
  try {
    return read(src, view);
  } catch (const nb::python_error&) {  // an attribute torch did not have: leave it to DLPack (error cleared)
    return false;
  } catch (const std::exception&) {  // nb::cast_error and friends
    return false;
  }
}

}  // namespace flashattn::python
