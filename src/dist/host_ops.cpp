// DeviceOps for host tensors: plain loops, parallel over rows with OpenMP.

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "cpu/common/elem.h"
#include "dist/device_ops.h"
#include "dist/lse_merge.h"
#include "flashattn/error.h"

namespace flashattn::dist::detail {

namespace {

using flashattn::detail::load_float;
using flashattn::detail::store_float;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Number of vectors (all dimensions but the last) of a view.
int64_t vector_count(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d + 1 < t.ndim; ++d) n *= t.shape[d];
  return n;
}

// Element offset of the first element of vector `index` (row-major over all dimensions but the last).
int64_t vector_offset(const Tensor& t, int64_t index) {
  int64_t offset = 0;
  for (int d = t.ndim - 2; d >= 0; --d) {
    offset += (index % t.shape[d]) * t.stride[d];
    index /= t.shape[d];
  }
  return offset;
}

int64_t inner(const Tensor& t) { return t.shape[t.ndim - 1]; }

char* bytes_at(const Tensor& t, int64_t element) { return static_cast<char*>(t.data) + element * dtype_size(t.dtype); }

class HostOps final : public DeviceOps {
 public:
  Buffer allocate(size_t bytes, Stream) override {
    // 64-byte alignment suits any dtype and keeps the backends' vector loads on whole cache lines.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !p)
      throw Error(Status::out_of_memory, "flashattn::dist: could not allocate " + std::to_string(bytes) +
                                             " bytes of ring workspace on the host");
    return Buffer(p, bytes, [](void* q) { std::free(q); });
  }

  void to_device(const void* host, void* dst, size_t bytes, Stream) override {
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void to_host(const void* src, void* host, size_t bytes, Stream) override {
    if (bytes) std::memcpy(host, src, bytes);
  }

  void copy(const Tensor& src, const Tensor& dst, Stream) override {
    const int64_t n = vector_count(src);
    const size_t row_bytes = size_t(inner(src)) * size_t(dtype_size(src.dtype));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(bytes_at(dst, vector_offset(dst, r)), bytes_at(src, vector_offset(src, r)), row_bytes);
  }

  void fill(const Tensor& dst, float value, Stream) override {
    const int64_t n = vector_count(dst), len = inner(dst);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int64_t base = vector_offset(dst, r);
      for (int64_t d = 0; d < len; ++d) store_float(dst.data, base + d, dst.dtype, value);
    }
  }

  void merge_partial(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& part_out, const Tensor& part_lse,
                     Stream) override {
    const int64_t nb = acc_out.shape[0], rows = acc_out.shape[1], heads = acc_out.shape[2], dim = acc_out.shape[3];
    float* acc = static_cast<float*>(acc_out.data);
    float* acc_l = static_cast<float*>(acc_lse.data);
    const float* part_l = static_cast<const float*>(part_lse.data);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t h = 0; h < heads; ++h) {
          const float lp = part_l[b * part_lse.stride[0] + h * part_lse.stride[1] + i * part_lse.stride[2]];
          if (!(lp < kInf)) continue;  // +inf: the row saw no key of this block (NaN would be a backend bug)
          float& la = acc_l[b * acc_lse.stride[0] + h * acc_lse.stride[1] + i * acc_lse.stride[2]];
          const LseMerge m = lse_merge(la, lp);
          float* a = acc + b * acc_out.stride[0] + i * acc_out.stride[1] + h * acc_out.stride[2];
          const int64_t p = b * part_out.stride[0] + i * part_out.stride[1] + h * part_out.stride[2];
          // While la = -inf the accumulator holds nothing yet (not even a defined value): overwrite it.
          const bool first = la == -kInf;
          for (int64_t d = 0; d < dim; ++d)
            a[d] = (first ? 0.0f : m.w_acc * a[d]) + m.w_part * load_float(part_out.data, p + d, part_out.dtype);
          la = m.lse;
        }
      }
    }
  }

  void finish_forward(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& out, const Tensor& lse,
                      Stream) override {
    const int64_t nb = acc_out.shape[0], rows = acc_out.shape[1], heads = acc_out.shape[2], dim = acc_out.shape[3];
    const float* acc = static_cast<const float*>(acc_out.data);
    const float* acc_l = static_cast<const float*>(acc_lse.data);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t h = 0; h < heads; ++h) {
          const float la = acc_l[b * acc_lse.stride[0] + h * acc_lse.stride[1] + i * acc_lse.stride[2]];
          const bool empty = la == -kInf;
          const float* a = acc + b * acc_out.stride[0] + i * acc_out.stride[1] + h * acc_out.stride[2];
          const int64_t o = b * out.stride[0] + i * out.stride[1] + h * out.stride[2];
          for (int64_t d = 0; d < dim; ++d) store_float(out.data, o + d, out.dtype, empty ? 0.0f : a[d]);
          if (lse.present())
            static_cast<float*>(lse.data)[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]] =
                empty ? kInf : la;
        }
      }
    }
  }

  void accumulate(const Tensor& acc, const Tensor& part, Stream) override {
    const int64_t n = vector_count(acc), len = inner(acc);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      float* a = static_cast<float*>(acc.data) + vector_offset(acc, r);
      const int64_t p = vector_offset(part, r);
      for (int64_t d = 0; d < len; ++d) a[d] += load_float(part.data, p + d, part.dtype);
    }
  }

  void convert(const Tensor& src, const Tensor& dst, Stream) override {
    const int64_t n = vector_count(src), len = inner(src);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const float* s = static_cast<const float*>(src.data) + vector_offset(src, r);
      const int64_t o = vector_offset(dst, r);
      for (int64_t d = 0; d < len; ++d) store_float(dst.data, o + d, dst.dtype, s[d]);
    }
  }
};

}  // namespace

DeviceOps& host_ops() {
  static HostOps host;
  return host;
}

}  // namespace flashattn::dist::detail
