#pragma once

// cpu_flash: FlashAttention-2 on the CPU (tiled, online softmax, recompute in backward), OpenMP over
// (sequence, head, tile), AVX-512 micro-kernels with a portable fallback. See docs/cpu_flash.md.

#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail::cpu_flash {

void forward(const FwdProblem& p, Stream stream);
void backward(const BwdProblem& p, Stream stream);
void forward_kvcache(const KVCacheProblem& p, Stream stream);

}  // namespace flashattn::detail::cpu_flash
