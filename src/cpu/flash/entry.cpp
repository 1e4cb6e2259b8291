// This instruction-set build's row of the table isa.cpp picks from.

#include "cpu/flash/entry.h"

#define FLASH_STRINGIFY_(x) #x
#define FLASH_STRINGIFY(x) FLASH_STRINGIFY_(x)

namespace flashattn::detail::cpu_flash::FLASH_ISA {

const IsaKernels& kernels() {
  static const IsaKernels k{FLASH_STRINGIFY(FLASH_ISA), forward, backward, forward_kvcache};
  return k;
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
