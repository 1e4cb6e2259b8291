#pragma once

// The reference backend's one parallel loop shape: every (i, j) of [0, n1) x [0, n2) on OpenMP threads.
// An exception must not leave an OpenMP region (std::terminate: a std::bad_alloc of one head's buffers
// once aborted the process through the C API): the first one is kept, the remaining pairs are skipped,
// and it is rethrown after the loop.

#include <atomic>
#include <cstdint>
#include <exception>

namespace flashattn::detail::reference {

template <typename Body>
void parallel_pairs(int64_t n1, int64_t n2, Body&& body) {
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t i = 0; i < n1; ++i) {
    for (int64_t j = 0; j < n2; ++j) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        body(i, j);
      } catch (...) {
#pragma omp critical(flashattn_reference_pairs)
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace flashattn::detail::reference
