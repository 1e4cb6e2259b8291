#pragma once

// Argument checks shared by the validators. Every message has the form
//   "<function>: <argument>: expected <what>, got <what was given>"
// so that a user can fix the call from the message alone. docs/errors.md lists them.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "flashattn/error.h"
#include "flashattn/tensor.h"

namespace flashattn::detail {

class ArgChecker {
 public:
  explicit ArgChecker(const char* function) : function_(function) {}

  [[noreturn]] void fail(const std::string& arg, const std::string& expected, const std::string& got) const;

  // The tensor must be present, have `rank` dims (named by `dims`, e.g. "(batch, seqlen_q, heads,
  // head_dim)"), non-negative sizes, a contiguous last dim, non-null data when non-empty, element
  // alignment, and offsets that fit int64.
  void tensor(const Tensor& t, const char* name, int rank, const char* dims) const;
  void dtype(const Tensor& t, const char* name, DType expected) const;
  void float_dtype(const Tensor& t, const char* name) const;  // f32, f16 or bf16
  void same_dtype(const Tensor& t, const char* name, DType expected, const char* of) const;
  void device(const Tensor& t, const char* name, Device expected, const char* of) const;
  void shape(const Tensor& t, const char* name, std::initializer_list<int64_t> expected, const char* dims) const;
  void contiguous(const Tensor& t, const char* name) const;  // fully row-major contiguous
  // For tensors the call writes (from many threads at once): no two elements share an address. Checked
  // as: sorted by stride, each dim of size > 1 steps past the whole span of the dims inside it.
  void no_self_overlap(const Tensor& t, const char* name) const;

  const char* function() const { return function_; }

 private:
  const char* function_;
};

std::string shape_string(const Tensor& t);  // "[2, 128, 8, 64]"
std::string dims_string(std::initializer_list<int64_t> dims);

}  // namespace flashattn::detail
