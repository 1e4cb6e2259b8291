#pragma once

// The entry points of this translation unit's instruction-set build (FLASH_ISA, set per object library
// by cmake/FlashattnCpuIsa.cmake) and the table isa.cpp selects them by.

#include "cpu/flash/flash.h"

#if !defined(FLASH_ISA)
#error "src/cpu/flash kernels are compiled per instruction set with FLASH_ISA defined (cmake/FlashattnCpuIsa.cmake)"
#endif

namespace flashattn::detail::cpu_flash::FLASH_ISA {

void forward(const FwdProblem& p, Stream stream);
void backward(const BwdProblem& p, Stream stream);
void forward_kvcache(const KVCacheProblem& p, Stream stream);

const IsaKernels& kernels();

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
