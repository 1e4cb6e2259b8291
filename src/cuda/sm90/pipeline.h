#pragma once

// Stage and phase of a ring of kStages shared-memory stages, each guarded by "full" mbarriers (armed by
// the producer, completed by TMA's bytes) and an "empty" mbarrier (completed by the consumers' arrivals).
// The j-th tile through the ring (j = 0, 1, ...) uses stage j % kStages; the barriers of that stage are in
// their (j / kStages)-th phase, so
//   consumers wait for full[stage] to complete the phase of parity  (j / kStages) & 1   = phase,
//   the producer waits for empty[stage] to complete the phase of parity  phase ^ 1, i.e. the release of
//   tile j - kStages; for j < kStages that is parity 1 on a fresh barrier, which passes at once
//   (cuda/common/async_ptx.cuh: try_wait.parity(P) is true while the current phase's parity is !P).
// Plain C++: tests/cpp/test_cuda_sm90.cpp runs producer and consumers through it against a model of the
// mbarrier phases with random interleavings.

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::detail::cuda::sm90 {

template <int kStages>
struct PipelineState {
  static_assert(kStages >= 1, "a ring has at least one stage");
  int stage = 0;
  uint32_t phase = 0;

  FA_HD void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  FA_HD uint32_t full_parity() const { return phase; }
  FA_HD uint32_t empty_parity() const { return phase ^ 1u; }
};

}  // namespace flashattn::detail::cuda::sm90
