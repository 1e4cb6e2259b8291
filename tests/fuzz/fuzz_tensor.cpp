#include "fuzz_tensor.h"

#include <cstring>
#include <random>
#include <vector>

#include "common/convert.h"

namespace fa_fuzz {

namespace {

using flashattn::detail::bf16_to_float;
using flashattn::detail::f16_to_float;
using flashattn::detail::float_to_bf16;
using flashattn::detail::float_to_f16;

// Views reaching further than this are never allocated; the decoders only build such views with strides
// so large that the extent overflows int64 (which the library must reject).
constexpr int64_t kMaxBytes = int64_t(1) << 28;

int dtype_bytes(int32_t dtype) {
  switch (dtype) {
    case FLASHATTN_F32:
      return 4;
    case FLASHATTN_F16:
      return 2;
    case FLASHATTN_BF16:
      return 2;
    case FLASHATTN_FP8_E4M3:
      return 1;
    case FLASHATTN_I32:
      return 4;
    default:
      return 0;
  }
}

// Lowest and highest element offsets of a view; false when a size is negative or an offset overflows.
bool offset_range(const flashattn_tensor& v, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = 0;
  for (int d = 0; d < v.ndim; ++d)
    if (v.shape[d] < 0) return false;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] == 0) {
      *lo = *hi = 0;
      return true;
    }
    int64_t term;
    if (__builtin_mul_overflow(v.shape[d] - 1, v.stride[d], &term)) return false;
    if (__builtin_add_overflow(term < 0 ? *lo : *hi, term, term < 0 ? lo : hi)) return false;
  }
  return true;
}

}  // namespace

FuzzTensor::FuzzTensor(const flashattn_tensor& view, bool misalign, bool null_data)
    : view_(view), null_data_(null_data) {
  if (!present()) return;
  int64_t lo, hi, span;
  const int elem = dtype_bytes(view_.dtype);
  const bool ok = view_.ndim > 0 && view_.ndim <= 4 && elem > 0 && offset_range(view_, &lo, &hi) &&
                  !__builtin_sub_overflow(hi, lo, &span) && !__builtin_add_overflow(span, 1, &span) &&
                  !__builtin_mul_overflow(span, int64_t(elem), &span) && span <= kMaxBytes;
  if (!ok) {
    // The library must reject this view before touching it; a 16-byte block makes any access an ASan report.
    unallocatable_ = true;
    nbytes_ = 16;
    data_byte_offset_ = 0;
  } else {
    const int64_t shift = misalign && elem > 1 ? 1 : 0;
    nbytes_ = size_t((numel() == 0 ? 0 : span) + shift);
    data_byte_offset_ = shift + (numel() == 0 ? 0 : -lo * elem);
  }
  bytes_.reset(new uint8_t[nbytes_]);
  std::memset(bytes_.get(), 0xFF, nbytes_);
  rebind();
}

FuzzTensor::FuzzTensor(const FuzzTensor& o)
    : view_(o.view_),
      nbytes_(o.nbytes_),
      data_byte_offset_(o.data_byte_offset_),
      null_data_(o.null_data_),
      unallocatable_(o.unallocatable_) {
  if (o.bytes_) {
    bytes_.reset(new uint8_t[nbytes_]);
    std::memcpy(bytes_.get(), o.bytes_.get(), nbytes_);
  }
  rebind();
}

FuzzTensor& FuzzTensor::operator=(const FuzzTensor& o) {
  if (this != &o) *this = FuzzTensor(o);
  return *this;
}

void FuzzTensor::rebind() { view_.data = (null_data_ || !bytes_) ? nullptr : bytes_.get() + data_byte_offset_; }

int FuzzTensor::elem_size() const { return dtype_bytes(view_.dtype); }

int64_t FuzzTensor::numel() const {
  if (!present() || view_.ndim < 0 || view_.ndim > 4) return 0;
  int64_t n = 1;
  for (int d = 0; d < view_.ndim; ++d) {
    if (view_.shape[d] <= 0) return 0;
    if (__builtin_mul_overflow(n, view_.shape[d], &n)) return 0;
  }
  return n;
}

bool FuzzTensor::addressable() const { return present() && !unallocatable_ && !null_data_ && elem_size() > 0; }

int64_t FuzzTensor::offset_of(int64_t index) const {
  int64_t off = 0;
  for (int d = view_.ndim - 1; d >= 0; --d) {
    off += (index % view_.shape[d]) * view_.stride[d];
    index /= view_.shape[d];
  }
  return off;
}

void FuzzTensor::fill(Fill how, uint64_t seed) {
  if (!addressable()) return;
  std::memset(bytes_.get(), 0xFF, nbytes_);
  if (how == Fill::poison) return;
  std::mt19937_64 rng(seed);
  const double range = how == Fill::large ? 200.0 : how == Fill::tiny ? 1e-3 : 2.0;
  std::uniform_real_distribution<double> dist(-range, range);
  for (int64_t i = 0, n = numel(); i < n; ++i) {
    const double x = dist(rng);
    set(i, how == Fill::sparse && (rng() & 3) != 0 ? 0.0 : x);
  }
}

double FuzzTensor::get(int64_t index) const {
  const uint8_t* p = static_cast<const uint8_t*>(view_.data) + offset_of(index) * elem_size();
  switch (view_.dtype) {
    case FLASHATTN_F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case FLASHATTN_F16:
    case FLASHATTN_BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return view_.dtype == FLASHATTN_F16 ? f16_to_float(h) : bf16_to_float(h);
    }
    case FLASHATTN_I32:
      return get_i32(index);
    default:
      return *p;
  }
}

void FuzzTensor::set(int64_t index, double value) {
  uint8_t* p = static_cast<uint8_t*>(view_.data) + offset_of(index) * elem_size();
  switch (view_.dtype) {
    case FLASHATTN_F32: {
      const float f = float(value);
      std::memcpy(p, &f, 4);
      break;
    }
    case FLASHATTN_F16:
    case FLASHATTN_BF16: {
      const uint16_t h = view_.dtype == FLASHATTN_F16 ? float_to_f16(float(value)) : float_to_bf16(float(value));
      std::memcpy(p, &h, 2);
      break;
    }
    case FLASHATTN_I32:
      set_i32(index, int32_t(value));
      break;
    default:
      *p = uint8_t(int(value * 8) & 0xFF);
      break;
  }
}

int32_t FuzzTensor::get_i32(int64_t index) const {
  int32_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(view_.data) + offset_of(index) * elem_size(), 4);
  return v;
}

void FuzzTensor::set_i32(int64_t index, int32_t value) {
  std::memcpy(static_cast<uint8_t*>(view_.data) + offset_of(index) * elem_size(), &value, 4);
}

bool FuzzTensor::same_bytes(const FuzzTensor& o) const {
  return nbytes_ == o.nbytes_ && (nbytes_ == 0 || std::memcmp(bytes_.get(), o.bytes_.get(), nbytes_) == 0);
}

bool FuzzTensor::outside_view_unchanged(const FuzzTensor& before) const {
  if (!addressable()) return same_bytes(before);
  std::vector<uint8_t> in_view(nbytes_, 0);
  const int64_t elem = elem_size();
  for (int64_t i = 0, n = numel(); i < n; ++i)
    std::memset(in_view.data() + data_byte_offset_ + offset_of(i) * elem, 1, size_t(elem));
  for (size_t b = 0; b < nbytes_; ++b)
    if (!in_view[b] && bytes_[b] != before.bytes_[b]) return false;
  return true;
}

}  // namespace fa_fuzz
