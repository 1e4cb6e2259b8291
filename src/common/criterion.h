#pragma once

// The arithmetic of flash-attn's acceptance criterion, shared by the test suite
// (tests/cpp/support/criterion.cpp) and flashattn-bench's all-close check (tools/bench/check.cpp), so
// that a benchmark's "ok" means what a passing test means: an output passes when its largest error
// against the fp64 reference is at most twice the error of a naive computation in the same dtype, plus
// a floor of four unit roundoffs of the dtype times the reference's largest finite magnitude (at least 1).
// Host-only.

#include <cmath>

#include "flashattn/tensor.h"

namespace flashattn::detail::criterion {

// Unit roundoff of the storage dtype.
inline double epsilon(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return std::ldexp(1.0, -8);
    case DType::f16:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -24);
  }
}

// |a - b|, with +inf == +inf counting as 0 (rows without a visible key) and any other non-finite value,
// such as the NaN of a poisoned element nobody wrote, as infinitely wrong.
inline double difference(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return INFINITY;
  if (std::isinf(a) || std::isinf(b)) return a == b ? 0.0 : INFINITY;
  return std::fabs(a - b);
}

// The floor for a reference whose largest finite magnitude, or 1 if larger, is `scale`.
inline double error_floor(DType dtype, double scale) { return 4.0 * epsilon(dtype) * scale; }

}  // namespace flashattn::detail::criterion
