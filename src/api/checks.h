#pragma once

// Argument checks shared by the validators. Every message has the form
//   "<function>: <argument>: expected <what>, got <what was given>"
// so that a user can fix the call from the message alone. docs/errors.md lists them.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

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
  // The device itself exists: index 0 for the CPU, >= 0 for CUDA and below the device count when CUDA
  // sees devices (with none, the dispatcher answers that no backend runs the call).
  void device_index(const Tensor& t, const char* name) const;
  void shape(const Tensor& t, const char* name, std::initializer_list<int64_t> expected, const char* dims) const;
  void contiguous(const Tensor& t, const char* name) const;  // fully row-major contiguous
  // For tensors the call writes (from many threads at once): no two elements share an address. Checked
  // as: sorted by stride, each dim of size > 1 steps past the whole span of the dims inside it.
  void no_self_overlap(const Tensor& t, const char* name) const;
  // For a tensor the call writes: it shares no address with any of `others` (absent ones are skipped).
  // Decided by may_share_memory (below).
  void no_shared_memory(const Tensor& written, const char* name,
                        std::initializer_list<std::pair<const Tensor&, const char*>> others) const;

  const char* function() const { return function_; }

 private:
  const char* function_;
};

// Whether a and b may share an address, where that is cheap to decide: byte ranges that do not intersect
// do not; intersecting ranges do when either tensor fills its range (its dims, sorted by stride, are
// row-major without gaps) or both are the same view. Two views with gaps whose ranges interleave (k =
// kv[:, 0] and v = kv[:, 1] of one buffer, as serving engines store caches; dq/dk/dv in one packed dqkv)
// are taken as disjoint: deciding every strided pair exactly is the general integer problem.
bool may_share_memory(const Tensor& a, const Tensor& b);

std::string shape_string(const Tensor& t);  // "[2, 128, 8, 64]"
std::string dims_string(std::initializer_list<int64_t> dims);

}  // namespace flashattn::detail
