#pragma once

// Work and traffic of one call, for TFLOP/s and GB/s (conventions in docs/benchmarking.md).

#include <cstdint>

#include "config.h"

namespace fabench {

// Query-key pairs a query sees in one (batch, head), counted exactly with the library's mask: Sq * Sk
// without a mask, about half of it when causal, less with a sliding window.
int64_t visible_pairs(const BenchConfig& c);

// Forward: 4 * B * H * D * visible pairs (QK^T and PV, a multiply-add = 2 FLOPs each). Backward counts
// 2.5x forward (five matmuls of the same size: QK^T recomputed, dV, dP, dQ, dK), fwd+bwd 3.5x.
double flop_count(const BenchConfig& c);

// Bytes that must cross memory at least once: q, k, v read and out written (forward); q, k, v, out,
// dout read and dq, dk, dv written (backward); the sum of both for fwd+bwd. The fp32 LSE is left out.
double byte_count(const BenchConfig& c);

}  // namespace fabench
