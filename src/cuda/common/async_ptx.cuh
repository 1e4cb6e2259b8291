#pragma once

// The sm_90 asynchronous-pipeline instructions, each wrapped once here: mbarrier (init, arrive, arrive
// with an expected transaction count, parity wait), the tensor-memory-access (TMA) tile load, the tensor-map
// prefetch, named barriers and setmaxnreg. mbarrier transactions and TMA are sm_90; setmaxnreg needs the
// arch-specific target (sm_90a). The kernels that use them are compiled for sm_90a only
// (cmake/FlashattnCuda.cmake); any other target gets a trap, which the host never launches.
//
// Semantics the kernels rely on (PTX ISA, "mbarrier"): a barrier counts pending arrivals and pending
// transaction bytes; its current phase completes when both reach zero, and the phase's parity (0, 1, 0, ...)
// flips. try_wait.parity(P) returns true once the phase of parity P has completed, i.e. while the barrier's
// current phase has parity !P: a fresh barrier (current phase 0) therefore satisfies a wait on parity 1,
// which is how a producer's first pass over empty stages goes through (cuda/sm90/pipeline.h).

#include <cuda.h>

#include <cstdint>

namespace flashattn::detail::cuda::async {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHATTN_ASYNC_ENABLED 1
#else
#define FLASHATTN_ASYNC_ENABLED 0
#endif

// Initialises the mbarrier at shared address `bar` to expect `count` arrivals per phase (one thread).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  __trap();
#endif
}

// Makes the initialisations above visible to the async proxy (TMA's complete_tx) and other threads; a
// CTA barrier must follow before any thread uses the barriers.
__device__ __forceinline__ void fence_mbarrier_init() {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival (release semantics: this thread's earlier shared-memory reads and writes happen before the
// phase completes for the waiters).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// One arrival of this thread, made by the hardware once every cp.async the thread issued before it has
// written shared memory (.noinc: it counts against the arrivals the barrier was initialised with, so each
// copying thread is one of them). The writes are the generic proxy's: a wgmma that reads them needs
// wgmma::fence_proxy_async() after its wait on the barrier.
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t bar) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

// One arrival that also adds `bytes` to the transactions the current phase waits for (the bytes of the
// TMA loads that will complete on this barrier).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// Adds `bytes` to the transactions the current phase waits for, without arriving: the thread that issues
// the TMA loads arrives later, once its own part of the stage (written through the generic proxy) is in.
__device__ __forceinline__ void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// True once the phase of parity `parity` has completed (acquire semantics). try_wait may block for a
// system-defined time before returning false.
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
#if FLASHATTN_ASYNC_ENABLED
  uint32_t done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
#else
  __trap();
  return true;
#endif
}

__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// TMA: loads the box of `map` at coordinates (c0, c1, c2, c3) (innermost first, in elements) into shared
// memory at `dst`, completing `bytes` transactions on the mbarrier `bar`; elements outside the tensor are
// zero-filled (the map's OOB fill). `map` must live in parameter, constant or global memory (a
// __grid_constant__ kernel parameter).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  __trap();
#endif
}

// Issues the TMA store of one box from shared address `src` to map coordinates (c0, c1, c2, c3), in this
// thread's current bulk group (one thread; the writes of the box's shared memory must be ordered before it
// with fence.proxy.async and a barrier). Boxes past the map's bounds are clipped, not written.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
#else
  __trap();
#endif
}

// Adds `bytes` (a multiple of 16) of fp32 values from shared address `src` into global memory at `dst`
// (both 16-byte aligned), element by element, as one bulk operation of this thread's current bulk group
// (one thread; the shared writes must be ordered before it with fence.proxy.async and a barrier). The
// adds are atomic per element, like red.global.add.f32.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Closes this thread's bulk group (TMA stores, bulk reductions).
__device__ __forceinline__ void bulk_commit_group() {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's bulk groups still read their shared memory (which may then be
// written again).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Waits until at most kPending of this thread's bulk groups are incomplete (their global writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Orders this thread's async-proxy accesses of global memory (bulk copies and reductions) with its
// generic-proxy ones: after a completed bulk reduction, before a release that publishes it; after an
// acquire, before the bulk reduction that must follow what was acquired.
__device__ __forceinline__ void fence_proxy_async_global() {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// Brings a tensor map into the cache ahead of its first TMA (one thread).
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
#if FLASHATTN_ASYNC_ENABLED
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32), e.g. one
// warpgroup's 128.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives on named barrier `id` without waiting (the producer side of a barrier other threads sync on),
// when `pred`: a predicated instruction rather than a branch, so that it may sit between a wgmma and its
// wait without ptxas serialising the wgmma (warning C7518, "WG.DP in divergent path").
__device__ __forceinline__ void named_barrier_arrive(bool pred, uint32_t id, uint32_t threads) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.arrive %1, %2;\n}\n" ::"r"(uint32_t(pred)), "r"(id),
               "r"(threads)
               : "memory");
}

// setmaxnreg (sm_90a): the executing warpgroup releases registers down to, or takes them up to, kRegs per
// thread. It takes effect only when the kernel has a register cap at entry (__launch_bounds__ with a
// minimum of 1 block, or -maxrregcount) and each warpgroup's role is one branch of an if/else.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

}  // namespace flashattn::detail::cuda::async
