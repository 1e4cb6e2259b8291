#pragma once

// A tensor argument of a fuzzed call: the view the call is given and the memory behind it. The memory
// is exactly the bytes the view spans (from its lowest to its highest element), so AddressSanitizer
// reports any read or write outside the view. Bytes inside that span but outside the view (the gaps of
// padded strides) are filled with NaN so that reading them shows up in the results, and writes to them
// are caught by comparing against a snapshot.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "flashattn/flashattn_c.h"

namespace fa_fuzz {

// How a tensor's elements are filled.
enum class Fill : uint8_t {
  poison,  // every byte 0xFF: NaN in every float dtype (outputs)
  normal,  // values in [-2, 2]
  large,   // values in [-200, 200]: f16 products overflow unless accumulated in fp32
  tiny,    // values in [-1e-3, 1e-3]
  sparse,  // mostly exact zeros
};

class FuzzTensor {
 public:
  FuzzTensor() = default;  // absent (ndim 0)
  // `view` gives dtype, device, ndim, shape and strides; its data is set here.
  // `misalign` shifts the data by one byte; `null_data` passes NULL instead of memory.
  FuzzTensor(const flashattn_tensor& view, bool misalign, bool null_data);
  FuzzTensor(const FuzzTensor& other);
  FuzzTensor& operator=(const FuzzTensor& other);
  FuzzTensor(FuzzTensor&&) noexcept = default;
  FuzzTensor& operator=(FuzzTensor&&) noexcept = default;

  bool present() const { return view_.ndim != 0; }
  // The view's extent overflows 64 bits: no memory stands behind it and every call must reject it.
  bool unallocatable() const { return unallocatable_; }
  // The view's element offsets can be enumerated (valid rank, dtype and sizes, memory allocated).
  bool addressable() const;
  const flashattn_tensor& view() const { return view_; }
  int64_t numel() const;

  void fill(Fill how, uint64_t seed);
  // Element access by flat row-major logical index (as if the view were contiguous).
  double get(int64_t index) const;
  void set(int64_t index, double value);
  int32_t get_i32(int64_t index) const;
  void set_i32(int64_t index, int32_t value);

  // Whole-allocation byte comparison (for "a rejected call writes nothing").
  bool same_bytes(const FuzzTensor& other) const;
  // Whether every byte outside the view's elements equals `before` (for "writes stay in the view").
  bool outside_view_unchanged(const FuzzTensor& before) const;

 private:
  int64_t offset_of(int64_t index) const;  // element offset from data
  int elem_size() const;
  void rebind();  // points view_.data into bytes_

  flashattn_tensor view_{};
  std::unique_ptr<uint8_t[]> bytes_;  // exactly the span of the view (plus the misalignment byte)
  size_t nbytes_ = 0;
  int64_t data_byte_offset_ = 0;  // where element offset 0 lives in bytes_
  bool null_data_ = false;
  bool unallocatable_ = false;
};

}  // namespace fa_fuzz
