#pragma once

// GPU timing (CUDA builds only): a non-default stream, CUDA events around each run, and an L2 flush
// between runs so that every run starts with cold caches, as in training where q, k, v were just written
// by another kernel and evicted by the ones in between.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "timer.h"

namespace fabench {

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  size_t l2_bytes = 0;
};

class CudaTimer final : public Timer {
 public:
  explicit CudaTimer(int device);
  ~CudaTimer() override;
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;

  // A non-blocking stream: no implicit synchronisation with the legacy default stream.
  flashattn::Stream stream() const override { return stream_; }
  const GpuInfo& info() const { return info_; }
  size_t flush_bytes() const { return flush_bytes_; }

  // Runs `run(stream)` warmup times, then iters times between a pair of events each, with the L2 flushed
  // (a memset of flush_bytes() on the stream) before every run, outside the events. Returns the iters
  // durations in milliseconds. `run` must only enqueue work on the stream, never synchronise.
  std::vector<double> time_ms(const std::function<void(flashattn::Stream)>& run, int warmup, int iters) override;
  std::string device_name() const override { return info_.name; }
  std::string describe() const override;

 private:
  void flush(int iteration);

  GpuInfo info_;
  cudaStream_t stream_ = nullptr;
  void* flush_buffer_ = nullptr;
  size_t flush_bytes_ = 0;
};

}  // namespace fabench
