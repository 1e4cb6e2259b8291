#pragma once

// The sm_90a warpgroup MMA (wgmma) instructions, each wrapped once here. Compiled to the instruction only
// for the arch-specific target (sm_90a, __CUDA_ARCH_FEAT_SM90_ALL); any other target gets a trap, and the
// host picks a wgmma kernel only where the library holds sm_90a code and the device is sm_90
// (FLASHATTN_SM90A, cmake/FlashattnCuda.cmake).
//
// Fragment layouts (PTX ISA, "Register fragments and shared memory matrix layouts" of wgmma), for the
// warp w of the warpgroup (rows 16w..16w+15 of the 64-row tile), g = lane / 4, t = lane % 4:
//   D (64 x N, fp32), as acc[N / 8][4]: acc[j][0..1] = D[16w + g][8j + 2t, +1], acc[j][2..3] = D[16w + g + 8][...],
//     the layout of mma.m16n8 C fragments repeated over the N / 8 column groups (cuda/common/ptx.h);
//   A from registers (64 x 16, 16-bit): a0..a3 as mma.m16n8k16's A fragment of the warp's 16 rows.
// Shared-memory operands are described by SmemDesc (below) in the 128-byte swizzled layouts.
//
// Ordering: wgmma reads its accumulators and register operands asynchronously. wgmma_fence() must
// separate ordinary writes of those registers from the wgmma that reads them; after commit, wait<N>()
// before ordinary reads, then fence_operands on the accumulators so that the compiler keeps those reads
// after the wait. Shared memory written through the generic proxy (st.shared, cp.async) needs
// fence_proxy_async() in each writing thread, then a barrier, before a wgmma reads it.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace flashattn::detail::cuda::wgmma {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHATTN_WGMMA_ENABLED 1
#else
#define FLASHATTN_WGMMA_ENABLED 0
#endif

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and
// stride byte offsets (each >> 4, 14 bits), swizzle mode in bits 62-63 (1 = 128-byte swizzle). The
// 128-byte swizzle expects its atoms (8 rows of 128 bytes, 16-byte chunk c of row r at c ^ (r % 8)) at
// 1024-byte aligned addresses; a start address may add an offset inside the atom's first row (the k-step).
//   K-major operand (rows of 64 elements along K, 128 bytes): stride = 1024 (from one 8-row group to the
//     next); leading unused (1).
//   MN-major operand (rows along K, 64 elements of MN each): leading = the stride between 64-element
//     panels of MN, stride = 1024 (from one 8-row group of K to the next).
__device__ __forceinline__ uint64_t smem_desc(uint32_t smem_address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((smem_address & 0x3FFFF) >> 4) | uint64_t((leading_bytes >> 4) & 0x3FFF) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

// The descriptor of the same layout `bytes` further on (a k-step inside a tile): only the start address
// field changes. It cannot carry out of its 14 bits (shared addresses are below 2^18), so the add is one
// 32-bit add of an immediate on the low word where `bytes` is a constant, instead of rebuilding the
// descriptor from the address before every wgmma.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | uint64_t(uint32_t(desc) + (bytes >> 4));
}

__device__ __forceinline__ void fence() {
#if FLASHATTN_WGMMA_ENABLED
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void commit_group() {
#if FLASHATTN_WGMMA_ENABLED
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int kPending>
__device__ __forceinline__ void wait_group() {
#if FLASHATTN_WGMMA_ENABLED
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving ordinary reads or writes of wgmma registers across the surrounding waits:
// fp32 accumulators, and A fragments (packed 16-bit pairs) that a wgmma in flight still reads, which must
// stay live and unmodified until this point so that their registers are not reused earlier.
template <typename R, int kN>
__device__ __forceinline__ void fence_operands(R (&regs)[kN][4]) {
  static_assert(std::is_same_v<R, float> || std::is_same_v<R, uint32_t>, "accumulators or A fragments");
#pragma unroll
  for (int j = 0; j < kN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (std::is_same_v<R, float>)
        asm volatile("" : "+f"(regs[j][e])::"memory");
      else
        asm volatile("" : "+r"(regs[j][e])::"memory");
    }
}

// Keeps a following wait_group after the computation of `x`. ptxas orders wgmma.wait_group only after
// the products and before the reads of their registers, and schedules it as early as that allows: ahead
// of independent work the source places before it, such as the softmax meant to run while a product is on
// the tensor cores. It does keep a wait after an earlier shared-memory access, and a load whose address
// depends on `x` cannot be issued before x: pass a value that depends on all of that work (a row sum of
// the softmax). Costs a compare, a select and one volatile LDS of `smem_address` (any address of the
// CTA's shared memory; the value read is discarded).
__device__ __forceinline__ void hold_wait_after(float x, uint32_t smem_address) {
#if FLASHATTN_WGMMA_ENABLED
  uint32_t discarded;
  asm volatile("ld.volatile.shared.u32 %0, [%1];\n"
               : "=r"(discarded)
               : "r"(smem_address + (x != x ? 4u : 0u))
               : "memory");
#endif
}

// Orders this thread's generic-proxy writes of shared memory (cp.async included) before later
// async-proxy reads (wgmma) of it; a barrier must follow.
__device__ __forceinline__ void fence_proxy_async() {
#if FLASHATTN_WGMMA_ENABLED
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The same fence where `on`: after a wait on a barrier that cp.async copies completed (cp.async's writes are
// the generic proxy's), before wgmma reads what they wrote. Written as a predicated PTX instruction; ptxas
// still emits a branch around the fence, and the consumers' loop it gives is the one measured (session 26:
// a plain `if` around fence_proxy_async() schedules the loop slightly differently, not measured).
__device__ __forceinline__ void fence_proxy_async_if(bool on) {
#if FLASHATTN_WGMMA_ENABLED
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p fence.proxy.async.shared::cta;\n}\n" ::"r"(uint32_t(on))
               : "memory");
#endif
}

// Operand lists of the wrappers below: the accumulator registers acc[j][0..3] of column groups j, and
// their placeholders.
#define FA_WGMMA_ACC4(acc, j) "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
#define FA_WGMMA_ACC32(acc)                                                                                          \
  FA_WGMMA_ACC4(acc, 0), FA_WGMMA_ACC4(acc, 1), FA_WGMMA_ACC4(acc, 2), FA_WGMMA_ACC4(acc, 3), FA_WGMMA_ACC4(acc, 4), \
      FA_WGMMA_ACC4(acc, 5), FA_WGMMA_ACC4(acc, 6), FA_WGMMA_ACC4(acc, 7)
#define FA_WGMMA_ACC64(acc)                                                                                          \
  FA_WGMMA_ACC32(acc), FA_WGMMA_ACC4(acc, 8), FA_WGMMA_ACC4(acc, 9), FA_WGMMA_ACC4(acc, 10), FA_WGMMA_ACC4(acc, 11), \
      FA_WGMMA_ACC4(acc, 12), FA_WGMMA_ACC4(acc, 13), FA_WGMMA_ACC4(acc, 14), FA_WGMMA_ACC4(acc, 15)
#define FA_WGMMA_D32                                                                                               \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define FA_WGMMA_D64                                                                                            \
  FA_WGMMA_D32                                                                                                  \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FA_WGMMA_ACC40(acc) FA_WGMMA_ACC32(acc), FA_WGMMA_ACC4(acc, 8), FA_WGMMA_ACC4(acc, 9)
#define FA_WGMMA_ACC128(acc)                                                                                           \
  FA_WGMMA_ACC64(acc), FA_WGMMA_ACC4(acc, 16), FA_WGMMA_ACC4(acc, 17), FA_WGMMA_ACC4(acc, 18), FA_WGMMA_ACC4(acc, 19), \
      FA_WGMMA_ACC4(acc, 20), FA_WGMMA_ACC4(acc, 21), FA_WGMMA_ACC4(acc, 22), FA_WGMMA_ACC4(acc, 23),                  \
      FA_WGMMA_ACC4(acc, 24), FA_WGMMA_ACC4(acc, 25), FA_WGMMA_ACC4(acc, 26), FA_WGMMA_ACC4(acc, 27),                  \
      FA_WGMMA_ACC4(acc, 28), FA_WGMMA_ACC4(acc, 29), FA_WGMMA_ACC4(acc, 30), FA_WGMMA_ACC4(acc, 31)
#define FA_WGMMA_D40 FA_WGMMA_D32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FA_WGMMA_ACC56(acc)                                                                                          \
  FA_WGMMA_ACC32(acc), FA_WGMMA_ACC4(acc, 8), FA_WGMMA_ACC4(acc, 9), FA_WGMMA_ACC4(acc, 10), FA_WGMMA_ACC4(acc, 11), \
      FA_WGMMA_ACC4(acc, 12), FA_WGMMA_ACC4(acc, 13)
#define FA_WGMMA_D56                                                                                            \
  FA_WGMMA_D32                                                                                                  \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55"
#define FA_WGMMA_ACC96(acc)                                                                                            \
  FA_WGMMA_ACC64(acc), FA_WGMMA_ACC4(acc, 16), FA_WGMMA_ACC4(acc, 17), FA_WGMMA_ACC4(acc, 18), FA_WGMMA_ACC4(acc, 19), \
      FA_WGMMA_ACC4(acc, 20), FA_WGMMA_ACC4(acc, 21), FA_WGMMA_ACC4(acc, 22), FA_WGMMA_ACC4(acc, 23)
#define FA_WGMMA_D96                                                                                  \
  FA_WGMMA_D64                                                                                        \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, " \
  "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FA_WGMMA_D128                                                                                 \
  FA_WGMMA_D64                                                                                        \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, " \
  "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
  "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "  \
  "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// scale-d is a predicate operand: set from the register operand `n`, which holds 1 (accumulate).
#define FA_WGMMA_PRED(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"

// acc += A B, m64n64k16, A (64 x 16, K-major) and B (64 x 16 rows of K, K-major) from shared memory.
#define FA_WGMMA_SS_M64N64(TYPE)                                                                               \
  asm volatile(FA_WGMMA_PRED(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" FA_WGMMA_D32 \
                                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                            \
               : FA_WGMMA_ACC32(acc)                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(1))
template <typename T>
__device__ __forceinline__ void mma_ss_m64n64k16(float (&acc)[8][4], uint64_t desc_a, uint64_t desc_b) {
#if FLASHATTN_WGMMA_ENABLED
  if constexpr (std::is_same_v<T, __half>)
    FA_WGMMA_SS_M64N64("f16");
  else
    FA_WGMMA_SS_M64N64("bf16");
#else
  __trap();
#endif
}

// acc += A B, m64n64k16, A (64 of M x 16 of K) and B (16 of K x 64 of N) from shared memory, both
// MN-major: rows along K, 64 elements of M (or N) each (the dQ = dS K product of the sm90 backward, whose
// dS^T and K tiles are stored with keys, its K dimension, along the rows).
#define FA_WGMMA_SS_M64N64_TT(TYPE)                                                                            \
  asm volatile(FA_WGMMA_PRED(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" FA_WGMMA_D32 \
                                 "}, %32, %33, p, 1, 1, 1, 1;\n}\n"                                            \
               : FA_WGMMA_ACC32(acc)                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(1))
template <typename T>
__device__ __forceinline__ void mma_ss_m64n64k16_tt(float (&acc)[8][4], uint64_t desc_a, uint64_t desc_b) {
#if FLASHATTN_WGMMA_ENABLED
  if constexpr (std::is_same_v<T, __half>)
    FA_WGMMA_SS_M64N64_TT("f16");
  else
    FA_WGMMA_SS_M64N64_TT("bf16");
#else
  __trap();
#endif
}

// acc += A B, m64nNk16 (N = 8 kN: 80, 112 or 128), operands as above (the S tiles of the sm90 forward).
#define FA_WGMMA_SS_M64N80(TYPE)                                                                               \
  asm volatile(FA_WGMMA_PRED(42) "wgmma.mma_async.sync.aligned.m64n80k16.f32." TYPE "." TYPE " {" FA_WGMMA_D40 \
                                 "}, %40, %41, p, 1, 1, 0, 0;\n}\n"                                            \
               : FA_WGMMA_ACC40(acc)                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(1))
#define FA_WGMMA_SS_M64N128(TYPE)                                                                               \
  asm volatile(FA_WGMMA_PRED(66) "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" FA_WGMMA_D64 \
                                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                             \
               : FA_WGMMA_ACC64(acc)                                                                            \
               : "l"(desc_a), "l"(desc_b), "r"(1))
#define FA_WGMMA_SS_M64N112(TYPE)                                                                               \
  asm volatile(FA_WGMMA_PRED(58) "wgmma.mma_async.sync.aligned.m64n112k16.f32." TYPE "." TYPE " {" FA_WGMMA_D56 \
                                 "}, %56, %57, p, 1, 1, 0, 0;\n}\n"                                             \
               : FA_WGMMA_ACC56(acc)                                                                            \
               : "l"(desc_a), "l"(desc_b), "r"(1))
template <typename T, int kN>
__device__ __forceinline__ void mma_ss_m64k16(float (&acc)[kN][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kN == 10 || kN == 14 || kN == 16, "m64n80k16, m64n112k16 or m64n128k16");
#if FLASHATTN_WGMMA_ENABLED
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (kN == 10 && kHalf)
    FA_WGMMA_SS_M64N80("f16");
  else if constexpr (kN == 10)
    FA_WGMMA_SS_M64N80("bf16");
  else if constexpr (kN == 14 && kHalf)
    FA_WGMMA_SS_M64N112("f16");
  else if constexpr (kN == 14)
    FA_WGMMA_SS_M64N112("bf16");
  else if constexpr (kHalf)
    FA_WGMMA_SS_M64N128("f16");
  else
    FA_WGMMA_SS_M64N128("bf16");
#else
  __trap();
#endif
}

// acc += A B, m64nNk16 (N = 64, 128, 192, 256), A (this warp's 16 x 16 of P) from registers, B (16 rows of K x N,
// N-major: transposed) from shared memory.
#define FA_WGMMA_RS_M64N64(TYPE)                                                                               \
  asm volatile(FA_WGMMA_PRED(37) "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" FA_WGMMA_D32 \
                                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                              \
               : FA_WGMMA_ACC32(acc)                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
#define FA_WGMMA_RS_M64N128(TYPE)                                                                               \
  asm volatile(FA_WGMMA_PRED(69) "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" FA_WGMMA_D64 \
                                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                               \
               : FA_WGMMA_ACC64(acc)                                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
#define FA_WGMMA_RS_M64N256(TYPE)                                                                                 \
  asm volatile(FA_WGMMA_PRED(133) "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" FA_WGMMA_D128 \
                                  "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"                           \
               : FA_WGMMA_ACC128(acc)                                                                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
#define FA_WGMMA_RS_M64N192(TYPE)                                                                                \
  asm volatile(FA_WGMMA_PRED(101) "wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPE "." TYPE " {" FA_WGMMA_D96 \
                                  "}, {%96, %97, %98, %99}, %100, p, 1, 1, 1;\n}\n"                              \
               : FA_WGMMA_ACC96(acc)                                                                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
// N = 8 kN: 64, 128, 192 or 256.
template <typename T, int kN>
__device__ __forceinline__ void mma_rs_m64k16_tn(float (&acc)[kN][4], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(kN == 8 || kN == 16 || kN == 24 || kN == 32, "m64n64k16, m64n128k16, m64n192k16 or m64n256k16");
#if FLASHATTN_WGMMA_ENABLED
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (kN == 32 && kHalf)
    FA_WGMMA_RS_M64N256("f16");
  else if constexpr (kN == 32)
    FA_WGMMA_RS_M64N256("bf16");
  else if constexpr (kN == 24 && kHalf)
    FA_WGMMA_RS_M64N192("f16");
  else if constexpr (kN == 24)
    FA_WGMMA_RS_M64N192("bf16");
  else if constexpr (kN == 8 && kHalf)
    FA_WGMMA_RS_M64N64("f16");
  else if constexpr (kN == 8)
    FA_WGMMA_RS_M64N64("bf16");
  else if constexpr (kHalf)
    FA_WGMMA_RS_M64N128("f16");
  else
    FA_WGMMA_RS_M64N128("bf16");
#else
  __trap();
#endif
}

// 8-bit (e4m3) products, k32: both operands K-major (8-bit wgmma has no transposed layouts). acc += A B with
// A (64 x 32) and B (N x 32, K-major rows of N) from shared memory: S = Q K^T of the FP8 forward, N = 128.
template <int kN>
__device__ __forceinline__ void mma_ss_m64k32_e4m3(float (&acc)[kN][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kN == 16, "m64n128k32");
#if FLASHATTN_WGMMA_ENABLED
  asm volatile(FA_WGMMA_PRED(66) "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" FA_WGMMA_D64
                                 "}, %64, %65, p, 1, 1;\n}\n"
               : FA_WGMMA_ACC64(acc)
               : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}

// acc += A B, m64nNk32 e4m3 with A (this warp's 16 x 32 of P, four registers of four bytes: the 8-bit A
// fragment) from registers and B (N x 32, K-major: V^T) from shared memory: O += P V of the FP8 forward,
// N = 128 (head dim 128).
template <int kN>
__device__ __forceinline__ void mma_rs_m64k32_e4m3(float (&acc)[kN][4], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(kN == 16, "m64n128k32");
#if FLASHATTN_WGMMA_ENABLED
  asm volatile(FA_WGMMA_PRED(69) "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" FA_WGMMA_D64
                                 "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : FA_WGMMA_ACC64(acc)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}

}  // namespace flashattn::detail::cuda::wgmma
