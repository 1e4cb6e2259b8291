#include "api/checks.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "flashattn/api.h"

namespace flashattn::detail {

std::string dims_string(std::initializer_list<int64_t> dims) {
  std::ostringstream s;
  s << '[';
  bool first = true;
  for (int64_t d : dims) {
    if (!first) s << ", ";
    s << d;
    first = false;
  }
  s << ']';
  return s.str();
}

std::string shape_string(const Tensor& t) {
  std::ostringstream s;
  s << '[';
  // A corrupt ndim (a C++ caller's Tensor is not checked before its message is built) prints no more
  // sizes than the Tensor holds.
  const int dims = std::clamp(t.ndim, 0, Tensor::kMaxDims);
  for (int i = 0; i < dims; ++i) s << (i ? ", " : "") << t.shape[i];
  s << ']';
  return s.str();
}

void ArgChecker::fail(const std::string& arg, const std::string& expected, const std::string& got) const {
  throw Error(Status::invalid_argument,
              std::string(function_) + ": " + arg + ": expected " + expected + ", got " + got);
}

namespace {

// Largest element offset reachable through the view, or -1 on int64 overflow.
int64_t max_offset(const Tensor& t) {
  int64_t off = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return 0;
    int64_t term;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.stride[i] < 0 ? -t.stride[i] : t.stride[i], &term) ||
        __builtin_add_overflow(off, term, &off))
      return -1;
  }
  return off;
}

// Number of elements, or -1 when it does not fit in int64 (possible with zero strides, which keep the
// offsets small). Tensor::numel() would overflow on such a view.
int64_t element_count(const Tensor& t) {
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i)
    if (__builtin_mul_overflow(n, t.shape[i], &n)) return -1;
  return n;
}

}  // namespace

void ArgChecker::tensor(const Tensor& t, const char* name, int rank, const char* dims) const {
  if (!t.present()) fail(name, std::string("a tensor ") + dims, "none");
  if (t.ndim > Tensor::kMaxDims)
    fail(name, std::to_string(rank) + " dims " + dims,
         "ndim " + std::to_string(t.ndim) + " (at most " + std::to_string(Tensor::kMaxDims) + ")");
  if (t.ndim != rank)
    fail(name, std::to_string(rank) + " dims " + dims, std::to_string(t.ndim) + " dims " + shape_string(t));
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) fail(name, "non-negative sizes", "shape " + shape_string(t));
    if (t.stride[i] < 0)
      fail(name, "non-negative strides", "stride " + std::to_string(t.stride[i]) + " in dim " + std::to_string(i));
  }
  const int64_t n = element_count(t);
  if (n < 0) fail(name, "a number of elements that fits in int64", "shape " + shape_string(t));
  if (n > 0 && t.data == nullptr) fail(name, "non-null data for " + std::to_string(n) + " elements", "nullptr");
  // A tensor with no elements is never addressed, so its strides are not held to anything (frameworks give
  // empty views arbitrary strides: numpy's q[:0] through DLPack, torch's expand of an empty dim).
  if (n > 0 && t.shape[rank - 1] > 1 && t.stride[rank - 1] != 1)
    fail(name, "a contiguous last dim (stride 1)", "stride " + std::to_string(t.stride[rank - 1]));
  int64_t off = max_offset(t);
  int64_t bytes;
  if (off < 0 || __builtin_mul_overflow(off + 1, int64_t(dtype_size(t.dtype)), &bytes))
    fail(name, "element offsets that fit in int64", "shape " + shape_string(t) + " with strides too large");
  if (t.data && reinterpret_cast<uintptr_t>(t.data) % uintptr_t(dtype_size(t.dtype)) != 0)
    fail(name, std::string("data aligned to ") + std::to_string(dtype_size(t.dtype)) + " bytes",
         "a misaligned pointer");
}

void ArgChecker::dtype(const Tensor& t, const char* name, DType expected) const {
  if (t.dtype != expected) fail(name, std::string("dtype ") + dtype_name(expected), dtype_name(t.dtype));
}

void ArgChecker::float_dtype(const Tensor& t, const char* name) const {
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16)
    fail(name, "dtype f32, f16 or bf16", dtype_name(t.dtype));
}

void ArgChecker::same_dtype(const Tensor& t, const char* name, DType expected, const char* of) const {
  if (t.dtype != expected)
    fail(name, std::string("dtype ") + dtype_name(expected) + " (same as " + of + ")", dtype_name(t.dtype));
}

void ArgChecker::device(const Tensor& t, const char* name, Device expected, const char* of) const {
  if (!(t.device == expected))
    fail(name, "device " + device_name(expected) + " (same as " + of + ")", device_name(t.device));
}

void ArgChecker::device_index(const Tensor& t, const char* name) const {
  const int index = t.device.index;
  if (t.device.type == DeviceType::cpu) {
    if (index != 0) fail(name, "device index 0 for a CPU tensor", device_name(t.device));
    return;
  }
  if (index < 0) fail(name, "a CUDA device index >= 0", std::to_string(index));
  const int count = cuda_device_count();
  if (count > 0 && index >= count)
    fail(name, "a CUDA device index in [0, " + std::to_string(count) + ") (devices visible)", std::to_string(index));
}

void ArgChecker::shape(const Tensor& t, const char* name, std::initializer_list<int64_t> expected,
                       const char* dims) const {
  bool ok = int(expected.size()) == t.ndim;
  int i = 0;
  for (int64_t d : expected) {
    if (!ok) break;
    ok = t.shape[i++] == d;
  }
  if (!ok) fail(name, "shape " + dims_string(expected) + " " + dims, "shape " + shape_string(t));
}

void ArgChecker::contiguous(const Tensor& t, const char* name) const {
  int64_t expect = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] > 1 && t.stride[i] != expect)
      fail(name, "a contiguous tensor",
           "stride " + std::to_string(t.stride[i]) + " in dim " + std::to_string(i) + " of shape " + shape_string(t));
    expect *= t.shape[i];
  }
}

namespace {

// The dims of size > 1 by increasing stride, into `dims` (insertion sort of at most kMaxDims entries);
// returns how many.
int dims_by_stride(const Tensor& t, int (&dims)[Tensor::kMaxDims]) {
  int n = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] <= 1) continue;
    int k = n++;
    for (; k > 0 && t.stride[dims[k - 1]] > t.stride[i]; --k) dims[k] = dims[k - 1];
    dims[k] = i;
  }
  return n;
}

bool empty_view(const Tensor& t) {
  if (!t.present()) return true;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) return true;
  return false;
}

// [first byte, one past the last byte) of a non-empty view; tensor() has bounded every offset by int64.
std::pair<uintptr_t, uintptr_t> byte_range(const Tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) last += (t.shape[i] - 1) * t.stride[i];
  const auto first = reinterpret_cast<uintptr_t>(t.data);
  const auto elem = uintptr_t(dtype_size(t.dtype));
  return {first, first + uintptr_t(last) * elem + elem};
}

// Every byte of the range belongs to an element: the dims of size > 1, by increasing stride, step by
// exactly the span inside them.
bool fills_range(const Tensor& t) {
  int dims[Tensor::kMaxDims];
  const int n = dims_by_stride(t, dims);
  int64_t span = 1;
  for (int k = 0; k < n; ++k) {
    if (t.stride[dims[k]] != span) return false;
    span *= t.shape[dims[k]];
  }
  return true;
}

bool same_view(const Tensor& a, const Tensor& b) {
  if (a.data != b.data || a.ndim != b.ndim || a.dtype != b.dtype) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i] || a.stride[i] != b.stride[i]) return false;
  return true;
}

}  // namespace

bool may_share_memory(const Tensor& a, const Tensor& b) {
  if (empty_view(a) || empty_view(b) || !(a.device == b.device)) return false;
  const auto [a0, a1] = byte_range(a);
  const auto [b0, b1] = byte_range(b);
  if (a1 <= b0 || b1 <= a0) return false;
  return fills_range(a) || fills_range(b) || same_view(a, b);
}

void ArgChecker::no_shared_memory(const Tensor& written, const char* name,
                                  std::initializer_list<std::pair<const Tensor&, const char*>> others) const {
  for (const auto& [other, other_name] : others)
    if (may_share_memory(written, other))
      fail(name, std::string("memory that no other argument uses (the call writes it)"),
           std::string("memory shared with ") + other_name);
}

void ArgChecker::no_self_overlap(const Tensor& t, const char* name) const {
  // An empty view has no two elements to share an address. It is also the one view whose strides
  // tensor() does not bound (max_offset), so the span below could overflow for it.
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) return;
  int dims[Tensor::kMaxDims];
  const int n = dims_by_stride(t, dims);
  int64_t span = 1;  // elements covered by the dims inside the current one; fits int64 (tensor(): max_offset)
  for (int k = 0; k < n; ++k) {
    const int d = dims[k];
    if (t.stride[d] < span) {
      std::string strides;
      for (int i = 0; i < t.ndim; ++i) strides += (i ? ", " : "") + std::to_string(t.stride[i]);
      fail(name, "a layout in which no two elements share an address (the call writes it)",
           "strides [" + strides + "] for shape " + shape_string(t));
    }
    span = t.stride[d] * (t.shape[d] - 1) + span;
  }
}

}  // namespace flashattn::detail
