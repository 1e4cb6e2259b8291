#include "arrays.h"

#include <string>
#include <string_view>
#include <utility>

#include "flashattn/error.h"

namespace flashattn::python {

namespace {

[[noreturn]] void fail(const char* function, const char* name, const std::string& expected, const std::string& got) {
  throw Error(Status::invalid_argument,
              std::string(function) + ": " + name + ": expected " + expected + ", got " + got);
}

// Name of a DLPack dtype in the library's vocabulary (f32, bf16, i32, ...: `dtype_name`), so that a dtype
// refused here and one refused by the C++ checks read alike.
std::string dlpack_dtype_name(nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  static constexpr std::pair<Code, const char*> kNames[] = {
      {Code::Int, "i"}, {Code::UInt, "u"}, {Code::Float, "f"}, {Code::Bfloat, "bf"}, {Code::Complex, "c"},
  };
  if (dt.code == uint8_t(Code::Bool)) return "bool";
  if (dt.code == uint8_t(Code::Float8_E4M3FN)) return "fp8_e4m3";
  std::string s = "DLPack type code " + std::to_string(int(dt.code)) + " of width ";
  for (const auto& [code, name] : kNames)
    if (dt.code == uint8_t(code)) s = name;
  s += std::to_string(int(dt.bits));
  if (dt.lanes != 1) s += "x" + std::to_string(int(dt.lanes));
  return s;
}

// The dtypes the library accepts for an argument, by its role: what a refusal here names as expected.
// Only dtypes that no argument accepts are refused here; the C++ checks refuse the rest per call.
const char* accepted_dtypes(const char* name) {
  static constexpr const char* kIndexArgs[] = {"cu_seqlens_q",  "cu_seqlens_k", "cache_seqlens", "cache_batch_idx",
                                               "cache_leftpad", "block_table",  "seqused_k"};
  static constexpr const char* kF32Args[] = {"softmax_lse", "alibi_slopes", "q_descale", "k_descale", "v_descale"};
  const std::string_view n(name);
  for (const char* a : kIndexArgs)
    if (n == a) return "dtype i32";
  for (const char* a : kF32Args)
    if (n == a) return "dtype f32";
  return "dtype f32, f16 or bf16";
}

DType to_dtype(nb::dlpack::dtype dt, const char* function, const char* name) {
  DType known;
  if (!dlpack_dtype(dt, known)) fail(function, name, accepted_dtypes(name), dlpack_dtype_name(dt));
  return known;
}

Device to_device(int type, int id, const char* function, const char* name) {
  Device known;
  if (!dlpack_device(type, id, known))
    fail(function, name, "a cpu or cuda array", "DLPack device type " + std::to_string(type));
  return known;
}

template <typename Array>
Tensor convert(const Array& a, const char* function, const char* name) {
  Tensor t;
  if (!a.is_valid()) return t;
  if (a.ndim() < 1 || a.ndim() > size_t(Tensor::kMaxDims))
    fail(function, name, "an array of 1 to " + std::to_string(Tensor::kMaxDims) + " dims",
         std::to_string(a.ndim()) + " dims");
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = to_dtype(a.dtype(), function, name);
  t.device = to_device(a.device_type(), a.device_id(), function, name);
  t.ndim = int(a.ndim());
  for (int i = 0; i < t.ndim; ++i) {
    t.shape[i] = int64_t(a.shape(size_t(i)));
    t.stride[i] = a.stride(size_t(i));  // DLPack strides are in elements, like Tensor's
  }
  return t;
}

}  // namespace

bool dlpack_dtype(nb::dlpack::dtype dt, DType& known) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return false;
  if (dt.code == uint8_t(Code::Float) && dt.bits == 32)
    known = DType::f32;
  else if (dt.code == uint8_t(Code::Float) && dt.bits == 16)
    known = DType::f16;
  else if (dt.code == uint8_t(Code::Bfloat) && dt.bits == 16)
    known = DType::bf16;
  else if (dt.code == uint8_t(Code::Float8_E4M3FN) && dt.bits == 8)
    known = DType::fp8_e4m3;
  else if (dt.code == uint8_t(Code::Int) && dt.bits == 32)
    known = DType::i32;
  else
    return false;
  return true;
}

bool dlpack_device(int type, int id, Device& known) {
  // Pinned host memory is ordinary CPU memory for the CPU backends.
  if (type == nb::device::cpu::value || type == nb::device::cuda_host::value)
    known = Device::cpu();
  else if (type == nb::device::cuda::value || type == nb::device::cuda_managed::value)
    known = Device::cuda(id);
  else
    return false;
  return true;
}

Tensor to_tensor(const InArray& a, const char* function, const char* name) {
  return a.direct ? a.view : convert(a.array, function, name);
}
Tensor to_tensor(const OutArray& a, const char* function, const char* name) {
  return a.direct ? a.view : convert(a.array, function, name);
}

}  // namespace flashattn::python
