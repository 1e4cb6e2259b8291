#include "host_tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "common/convert.h"
#include "flashattn/api.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fa_test {

using namespace flashattn::detail;

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = 1;
  for (int64_t s : shape_) numel_ *= s;
  bytes_.assign(size_t(numel_ * flashattn::dtype_size(dtype_)), 0);
}

Tensor HostTensor::view() const {
  Tensor t;
  if (!present()) return t;
  t.data = const_cast<uint8_t*>(bytes_.data());
  t.dtype = dtype_;
  t.device = Device::cpu();
  t.ndim = int(shape_.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape_[d];
    t.stride[d] = stride;
    stride *= shape_[d] > 0 ? shape_[d] : 1;
  }
  return t;
}

double HostTensor::get(int64_t i) const {
  const uint8_t* p = bytes_.data();
  switch (dtype_) {
    case DType::f32:
      return reinterpret_cast<const float*>(p)[i];
    case DType::f16:
      return f16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::bf16:
      return bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::fp8_e4m3:
      return e4m3_to_float(p[i]);
    case DType::i32:
      return reinterpret_cast<const int32_t*>(p)[i];
    default:
      throw std::runtime_error("HostTensor::get: unsupported dtype");
  }
}

void HostTensor::set(int64_t i, double value) {
  uint8_t* p = bytes_.data();
  switch (dtype_) {
    case DType::f32:
      reinterpret_cast<float*>(p)[i] = float(value);
      break;
    case DType::f16:
      reinterpret_cast<uint16_t*>(p)[i] = float_to_f16(float(value));
      break;
    case DType::bf16:
      reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(float(value));
      break;
    case DType::fp8_e4m3:
      p[i] = float_to_e4m3(float(value));
      break;
    case DType::i32:
      reinterpret_cast<int32_t*>(p)[i] = int32_t(value);
      break;
    default:
      throw std::runtime_error("HostTensor::set: unsupported dtype");
  }
}

void HostTensor::fill_normal(std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> dist(0.0, stddev);
  for (int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
}

void HostTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < numel_; ++i) set(i, dist(rng));
}

void HostTensor::fill(double value) {
  for (int64_t i = 0; i < numel_; ++i) set(i, value);
}

void HostTensor::poison() {
  if (dtype_ == DType::i32) {
    fill(double(std::numeric_limits<int32_t>::min()));
    return;
  }
  fill(std::numeric_limits<double>::quiet_NaN());
}

std::vector<double> HostTensor::to_double() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[size_t(i)] = get(i);
  return out;
}

HostTensor HostTensor::as(DType dtype) const {
  HostTensor out(dtype, shape_);
  for (int64_t i = 0; i < numel_; ++i) out.set(i, get(i));
  return out;
}

HostTensor i32_tensor(const std::vector<int32_t>& values) { return i32_tensor(values, {int64_t(values.size())}); }

HostTensor i32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape) {
  HostTensor t(DType::i32, std::move(shape));
  if (int64_t(values.size()) != t.numel()) throw std::runtime_error("i32_tensor: size mismatch");
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

#if defined(FLASHATTN_WITH_CUDA)
namespace {
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace
#endif

DeviceTensor::DeviceTensor(const HostTensor& host, Device device) : meta_(host), device_(device) {
  if (device.type == flashattn::DeviceType::cuda && host.present()) {
#if defined(FLASHATTN_WITH_CUDA)
    cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
    cuda_check(cudaMalloc(&device_ptr_, host.nbytes() ? host.nbytes() : 1), "cudaMalloc");
    cuda_check(cudaMemcpy(device_ptr_, host.data(), host.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
#else
    throw std::runtime_error("DeviceTensor: built without CUDA");
#endif
  }
}

DeviceTensor::~DeviceTensor() { release(); }

DeviceTensor::DeviceTensor(DeviceTensor&& o) noexcept
    : meta_(std::move(o.meta_)), device_(o.device_), device_ptr_(o.device_ptr_) {
  o.device_ptr_ = nullptr;
}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& o) noexcept {
  if (this != &o) {
    release();
    meta_ = std::move(o.meta_);
    device_ = o.device_;
    device_ptr_ = o.device_ptr_;
    o.device_ptr_ = nullptr;
  }
  return *this;
}

void DeviceTensor::release() {
#if defined(FLASHATTN_WITH_CUDA)
  if (device_ptr_) cudaFree(device_ptr_);
#endif
  device_ptr_ = nullptr;
}

Tensor DeviceTensor::view() const {
  Tensor t = meta_.view();
  if (device_.type == flashattn::DeviceType::cuda && t.present()) {
    t.data = device_ptr_;
    t.device = device_;
  }
  return t;
}

HostTensor DeviceTensor::download() const {
  HostTensor out = meta_;
  if (device_.type == flashattn::DeviceType::cuda && meta_.present()) {
#if defined(FLASHATTN_WITH_CUDA)
    cuda_check(cudaDeviceSynchronize(), "kernel execution");
    cuda_check(cudaMemcpy(out.data(), device_ptr_, out.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
#endif
  }
  return out;
}

bool bitwise_equal(const HostTensor& a, const HostTensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

bool cuda_available() { return flashattn::built_with_cuda() && flashattn::cuda_device_count() > 0; }

void device_synchronize(Device device) {
#if defined(FLASHATTN_WITH_CUDA)
  if (device.type == flashattn::DeviceType::cuda) cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  (void)device;
#endif
}

}  // namespace fa_test
