#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace flashattn {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  fp8_e4m3,  // float8 e4m3fn: q, k, v of the forward (FwdParams), out in bf16
  i32,       // index tensors: cu_seqlens, block_table, cache_seqlens, ...
};

const char* dtype_name(DType d);
int dtype_size(DType d);

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool operator==(const Device&) const = default;
};

std::string device_name(Device d);

// A non-owning view of a strided tensor of up to kMaxDims dimensions. Strides are in elements.
// A default-constructed Tensor (ndim == 0) means "absent" for optional arguments.
struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};

  bool present() const { return ndim > 0; }
  int64_t numel() const;
  int64_t size(int dim) const { return shape[dim]; }

  // A row-major contiguous view of `data` with the given shape.
  static Tensor contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           Device device = Device::cpu());
  // A view with explicit strides (elements).
  static Tensor strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                        std::initializer_list<int64_t> stride, Device device = Device::cpu());

  std::string describe() const;  // e.g. "bf16[2, 128, 8, 64] on cuda:0"
};

}  // namespace flashattn
