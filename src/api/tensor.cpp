#include "flashattn/tensor.h"

#include <sstream>

#include "api/checks.h"
#include "flashattn/error.h"

namespace flashattn {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::i32:
      return "i32";
  }
  return "unknown";
}

int dtype_size(DType d) {
  switch (d) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::i32:
      return 4;
  }
  return 1;
}

std::string device_name(Device d) {
  if (d.type == DeviceType::cpu) return d.index == 0 ? "cpu" : "cpu:" + std::to_string(d.index);
  return "cuda:" + std::to_string(d.index);
}

int64_t Tensor::numel() const {
  if (ndim == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim && i < kMaxDims; ++i) n *= shape[i];
  return n;
}

namespace {

Tensor with_shape(const char* fn, void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  if (shape.size() == 0 || shape.size() > size_t(Tensor::kMaxDims))
    throw Error(Status::invalid_argument,
                std::string(fn) + ": shape: expected 1 to 4 dims, got " + std::to_string(shape.size()));
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = int(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  return t;
}

}  // namespace

Tensor Tensor::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  Tensor t = with_shape("Tensor::contiguous", data, dtype, shape, device);
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = stride;
    if (d > 0 && __builtin_mul_overflow(stride, t.shape[d] > 0 ? t.shape[d] : 1, &stride))
      throw Error(Status::invalid_argument,
                  "Tensor::contiguous: shape: expected strides that fit in int64, got " + detail::shape_string(t));
  }
  return t;
}

Tensor Tensor::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> stride, Device device) {
  if (shape.size() != stride.size())
    throw Error(Status::invalid_argument, "Tensor::strided: stride: expected " + std::to_string(shape.size()) +
                                              " strides (one per dim), got " + std::to_string(stride.size()));
  Tensor t = with_shape("Tensor::strided", data, dtype, shape, device);
  int i = 0;
  for (int64_t s : stride) t.stride[i++] = s;
  return t;
}

std::string Tensor::describe() const {
  if (!present()) return "none";
  return std::string(dtype_name(dtype)) + detail::shape_string(*this) + " on " + device_name(device);
}

}  // namespace flashattn
