#pragma once

// What the sm80 backend has only for benchmarking and profiling, gathered here so that the kernels and
// launch paths carry one call each instead of inline #ifs:
//  * environment switches that turn a tuned choice off, to measure both sides of it on one device in one
//    run (docs/kernels.md); each is read once per process;
//  * the forward's CTA trace, compiled in by -DFLASHATTN_SM80_TRACE only (docs/kernels.md, "Tracing the
//    forward's CTAs"): each CTA records its SM, its last query tile and its start and end time, and the
//    launch appends them to the CSV file named by FLASHATTN_SM80_TRACE_FILE. Without the definition the
//    hooks are empty and compile to nothing.

#include <cstdint>

#include "common/env_switch.h"

#if defined(FLASHATTN_SM80_TRACE)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/check.h"
#endif

#if defined(__CUDACC__)
#include "cuda/common/ptx.h"
#endif

namespace flashattn::detail::cuda::sm80 {

// FLASHATTN_SM80_PAIRED_FWD=0: the forward never runs the paired tile (kernel_traits.h, use_paired_fwd).
inline bool paired_fwd_disabled() {
  static const bool off = env_switch_off("FLASHATTN_SM80_PAIRED_FWD");
  return off;
}

// FLASHATTN_SM80_PERSISTENT_FWD=0: the forward's grid is one CTA per tile (fwd_tile_scheduler.cuh).
inline bool persistent_fwd_disabled() {
  static const bool off = env_switch_off("FLASHATTN_SM80_PERSISTENT_FWD");
  return off;
}

// FLASHATTN_SM80_TILE_GROUPS=0: a masked call's tiles are listed per head (attn/tile_order.h) in both
// directions; FLASHATTN_SM80_BWD_TILE_GROUPS=0 in the backward only.
inline bool tile_groups_disabled() {
  static const bool off = env_switch_off("FLASHATTN_SM80_TILE_GROUPS");
  return off;
}
inline bool bwd_tile_groups_disabled() {
  static const bool off = tile_groups_disabled() || env_switch_off("FLASHATTN_SM80_BWD_TILE_GROUPS");
  return off;
}

#if defined(FLASHATTN_SM80_TRACE)
// When and where one CTA ran (FwdArgs::trace holds one per CTA).
struct FwdCtaTrace {
  uint32_t smid = 0;
  int m_block = 0;                    // the query tile of the CTA's last work tile
  uint64_t start_ns = 0, end_ns = 0;  // %globaltimer at the CTA's start and after its last store
};
#endif

#if defined(__CUDACC__)
// The kernel's side: constructed at the CTA's start, told each work tile's query tile, finished after
// the CTA's last store.
struct FwdCtaTracer {
#if defined(FLASHATTN_SM80_TRACE)
  uint64_t start_ns = ptx::global_ns();
  int m_block = 0;
  __device__ __forceinline__ void tile(int m) { m_block = m; }
  template <typename Args>
  __device__ __forceinline__ void finish(const Args& args, int tid) {
    __syncthreads();
    if (tid == 0) args.trace[blockIdx.x] = FwdCtaTrace{ptx::sm_id(), m_block, start_ns, ptx::global_ns()};
  }
#else
  __device__ __forceinline__ void tile(int) {}
  template <typename Args>
  __device__ __forceinline__ void finish(const Args&, int) {}
#endif
};
#endif

// The launch's side: allocates the per-CTA records before the launch; after it, waits for the kernel,
// appends its CTAs to the trace file (call, CTA, SM, start and end in ns from the call's first start,
// query tiles per head, tiles, causal, the CTA's query tile; calls numbered per process) and frees them.
template <typename Args>
void fwd_trace_begin([[maybe_unused]] Args& args, [[maybe_unused]] int64_t blocks) {
#if defined(FLASHATTN_SM80_TRACE)
  FA_CUDA_CHECK(cudaMalloc(&args.trace, blocks * sizeof(FwdCtaTrace)));
#endif
}
template <typename Args, typename Stream>
void fwd_trace_end([[maybe_unused]] const Args& args, [[maybe_unused]] int64_t blocks, [[maybe_unused]] Stream stream) {
#if defined(FLASHATTN_SM80_TRACE)
  static int call = 0;
  std::vector<FwdCtaTrace> trace(static_cast<size_t>(blocks));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  FA_CUDA_CHECK(cudaMemcpy(trace.data(), args.trace, trace.size() * sizeof(FwdCtaTrace), cudaMemcpyDeviceToHost));
  FA_CUDA_CHECK(cudaFree(args.trace));
  const char* path = std::getenv("FLASHATTN_SM80_TRACE_FILE");
  std::FILE* f = path ? std::fopen(path, "a") : nullptr;
  if (f == nullptr) return;
  uint64_t t0 = ~uint64_t(0);
  for (const FwdCtaTrace& t : trace) t0 = t.start_ns < t0 ? t.start_ns : t0;
  for (size_t i = 0; i < trace.size(); ++i)
    std::fprintf(f, "%d,%zu,%u,%llu,%llu,%d,%d,%d,%d\n", call, i, trace[i].smid,
                 static_cast<unsigned long long>(trace[i].start_ns - t0),
                 static_cast<unsigned long long>(trace[i].end_ns - t0), args.num_m_blocks, args.num_tiles,
                 args.p.score.window_right >= 0 ? 1 : 0, trace[i].m_block);
  std::fclose(f);
  ++call;
#endif
}

}  // namespace flashattn::detail::cuda::sm80
