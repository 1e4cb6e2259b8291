#pragma once

// cpu_flash: FlashAttention-2 on the CPU (tiled, online softmax, recompute in backward), OpenMP over
// (sequence, head, tile). The kernels are compiled once per instruction set (namespaces cpu_flash::<isa>,
// cmake/FlashattnCpuIsa.cmake); the entry points below run the copy picked at run time. See
// docs/cpu_flash.md.

#include <vector>

#include "api/problem.h"
#include "flashattn/params.h"

namespace flashattn::detail::cpu_flash {

// The entry points of one instruction-set build of the kernels.
struct IsaKernels {
  const char* name;  // "avx512_bf16", "avx512", "avx2", "generic" or "native"
  void (*forward)(const FwdProblem&, Stream);
  void (*backward)(const BwdProblem&, Stream);
  void (*forward_kvcache)(const KVCacheProblem&, Stream);
};

// The builds compiled in that this CPU (and OS) can run, best first; never empty.
const std::vector<const IsaKernels*>& runnable_isas();

// The build the entry points run (api/cpu_isa.cpp: the best runnable one unless FLASHATTN_CPU_ISA or
// set_cpu_isa() names another).
const IsaKernels& active_isa();

void forward(const FwdProblem& p, Stream stream);
void backward(const BwdProblem& p, Stream stream);
void forward_kvcache(const KVCacheProblem& p, Stream stream);

}  // namespace flashattn::detail::cpu_flash
