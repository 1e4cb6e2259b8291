#pragma once

// Scratch memory of the cpu_flash backend: one 64-byte aligned fp32 arena per OpenMP thread, allocated
// before the parallel region (so that an allocation failure is an exception on the calling thread, not a
// std::terminate inside OpenMP) and carved into the tiles each engine needs.

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "cpu/flash/tile_config.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

// Hands out consecutive regions of a buffer, each starting on a 64-byte boundary. Used twice per engine:
// once on a null base to measure the arena size, then on the real arena.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(int64_t floats) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += round_up(floats, kLanes);
    return p;
  }
  int64_t* take_i64(int64_t count) { return reinterpret_cast<int64_t*>(take(2 * count)); }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

class ThreadArenas {
 public:
  // `floats` per thread, for omp_get_max_threads() threads.
  explicit ThreadArenas(int64_t floats) : stride_(round_up(floats, kLanes)), threads_(omp_get_max_threads()) {
    const size_t bytes = size_t(stride_ * threads_) * sizeof(float);
    data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
    if (!data_) throw std::bad_alloc();
  }
  float* mine() const { return data_.get() + stride_ * omp_get_thread_num(); }

 private:
  int64_t stride_;
  int64_t threads_;
  std::unique_ptr<float, FreeDeleter> data_;
};

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
