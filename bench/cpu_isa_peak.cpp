// Peak of the two dot-product units cpu_flash uses on AVX-512 CPUs, from loops of independent
// instructions (16 accumulators, no dependency between consecutive instructions): vfmadd231ps (fp32,
// 32 flops per zmm instruction) and vdpbf16ps (bf16 pairs, 64 flops). The floor against which
// bench/results/*-cpu-isa.md reads the kernels' GFLOP/s.
// Each thread times itself in its own CPU time (CLOCK_THREAD_CPUTIME_ID), so that the figure is the
// per-core throughput even on a machine shared with other work; threads > 1 shows whether two threads
// on two cores each keep it.
// Build: g++ -O2 -march=x86-64-v4 -mavx512bf16 -fopenmp bench/cpu_isa_peak.cpp -o /tmp/cpu_isa_peak
// Run:   /tmp/cpu_isa_peak [threads]

#include <immintrin.h>
#include <omp.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr long kIters = 200000000;

template <bool Bf16>
double run(int threads) {
  double sink = 0, worst = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink) reduction(max : worst)
  {
    timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-9f);
    const __m512 a = _mm512_set1_ps(1e-3f), b = _mm512_set1_ps(1e-3f);
    const __m512bh ah = _mm512_cvtne2ps_pbh(a, a), bh = _mm512_cvtne2ps_pbh(b, b);
    for (long it = 0; it < kIters / 16; ++it) {
      // Unrolled, and acc[] never has its address taken (no asm operand), so that the accumulators live in
      // registers: otherwise the compiler keeps acc[] in memory and stores every accumulator on every
      // iteration, which bounds the loop at about half the unit's rate (the figure this file printed
      // before 2026-12-06).
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        if constexpr (Bf16)
          acc[i] = _mm512_dpbf16_ps(acc[i], ah, bh);
        else
          acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
      }
    }
    __m512 s = acc[0];
    for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
    sink += _mm512_reduce_add_ps(s);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    worst = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
  }
  if (sink == 42) std::puts("");
  // Per core: one thread's instructions over the slowest thread's CPU time.
  return double(kIters) * (Bf16 ? 64.0 : 32.0) / worst / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  for (int rep = 0; rep < 3; ++rep)
    std::printf("threads %d, per core: fp32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s\n", threads, run<false>(threads),
                run<true>(threads));
}
