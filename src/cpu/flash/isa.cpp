// The instruction-set builds of the kernels compiled into this library (FLASHATTN_CPU_ISA_<NAME>, set by
// cmake/FlashattnCpuIsa.cmake) and which of them this CPU runs. Compiled for the baseline ISA: nothing
// here may execute an instruction the CPU might lack.

#include "cpu/flash/flash.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace flashattn::detail::cpu_flash {

#define FLASH_DECLARE_ISA(isa) \
  namespace isa {              \
  const IsaKernels& kernels(); \
  }
#if defined(FLASHATTN_CPU_ISA_NATIVE)
FLASH_DECLARE_ISA(native)
#endif
#if defined(FLASHATTN_CPU_ISA_AVX512_BF16)
FLASH_DECLARE_ISA(avx512_bf16)
#endif
#if defined(FLASHATTN_CPU_ISA_AVX512)
FLASH_DECLARE_ISA(avx512)
#endif
#if defined(FLASHATTN_CPU_ISA_AVX2)
FLASH_DECLARE_ISA(avx2)
#endif
#if defined(FLASHATTN_CPU_ISA_GENERIC)
FLASH_DECLARE_ISA(generic)
#endif
#undef FLASH_DECLARE_ISA

namespace {

#if defined(__x86_64__) || defined(__i386__)
// Bit `bit` of register `reg` (0 eax, 1 ebx, 2 ecx, 3 edx) of CPUID leaf `leaf`, for the features that
// clang's __builtin_cpu_supports does not name (f16c, movbe, lzcnt); none of them needs OS support beyond
// the AVX state that the avx2 check below covers.
bool cpuid_bit(unsigned leaf, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}

// What each build was compiled with (-march=x86-64-v3 / -v4 and -mavx512bf16), as CPUID reports it.
// __builtin_cpu_supports also checks that the OS saves the registers (XCR0), not only the CPUID bits.
bool cpu_has_x86_64_v3() {
  __builtin_cpu_init();
  const bool f16c = cpuid_bit(1, 2, 29), movbe = cpuid_bit(1, 2, 22), lzcnt = cpuid_bit(0x80000001u, 2, 5);
  return __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && f16c &&
         movbe && lzcnt;
}
bool cpu_has_x86_64_v4() {
  return cpu_has_x86_64_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif

std::vector<const IsaKernels*> detect() {
  std::vector<const IsaKernels*> out;
#if defined(FLASHATTN_CPU_ISA_NATIVE)
  out.push_back(&native::kernels());  // the build machine's own ISA: trusted, as -march=native always was
#endif
#if defined(FLASHATTN_CPU_ISA_AVX512_BF16)
  if (cpu_has_x86_64_v4() && __builtin_cpu_supports("avx512bf16")) out.push_back(&avx512_bf16::kernels());
#endif
#if defined(FLASHATTN_CPU_ISA_AVX512)
  if (cpu_has_x86_64_v4()) out.push_back(&avx512::kernels());
#endif
#if defined(FLASHATTN_CPU_ISA_AVX2)
  if (cpu_has_x86_64_v3()) out.push_back(&avx2::kernels());
#endif
#if defined(FLASHATTN_CPU_ISA_GENERIC)
  out.push_back(&generic::kernels());
#endif
  return out;
}

}  // namespace

const std::vector<const IsaKernels*>& runnable_isas() {
  static const std::vector<const IsaKernels*> isas = detect();
  return isas;
}

void forward(const FwdProblem& p, Stream stream) { active_isa().forward(p, stream); }
void backward(const BwdProblem& p, Stream stream) { active_isa().backward(p, stream); }
void forward_kvcache(const KVCacheProblem& p, Stream stream) { active_isa().forward_kvcache(p, stream); }

}  // namespace flashattn::detail::cpu_flash
