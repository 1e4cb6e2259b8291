#include <algorithm>
#include <cstdint>

#include "cuda/common/check.h"
#include "timer_cuda.h"

namespace fabench {

namespace {

// Busy-waits on the GPU's nanosecond timer. Launched once before the timed runs, it keeps the stream
// busy while the host enqueues them, so each start event is followed by already-queued work: otherwise a
// start event recorded on an idle GPU would also time the host's validation and launch of the next run.
__global__ void hold_stream_kernel(uint64_t nanoseconds) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

// Host-side cost of enqueueing one run (flush memset, two events, validation and launch) is well below
// this; the hold is capped so a long --iters does not idle the GPU for long.
constexpr uint64_t kHoldPerRunNs = 50'000;
constexpr uint64_t kMaxHoldNs = 20'000'000;

// Events of the timed runs, destroyed on every exit path (a run may throw).
class EventPairs {
 public:
  explicit EventPairs(int n) : events_(size_t(2 * n), nullptr) {
    for (cudaEvent_t& e : events_) FA_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~EventPairs() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  EventPairs(const EventPairs&) = delete;
  EventPairs& operator=(const EventPairs&) = delete;
  cudaEvent_t start(int i) const { return events_[size_t(2 * i)]; }
  cudaEvent_t stop(int i) const { return events_[size_t(2 * i + 1)]; }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

CudaTimer::CudaTimer(int device) {
  info_.index = device;
  FA_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  info_.name = prop.name;
  info_.sm_count = prop.multiProcessorCount;
  int l2 = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  info_.l2_bytes = size_t(l2);
  // Twice the L2: writing that much evicts every line the previous run left, whatever the replacement
  // policy; the floor covers a device that reports no L2 size.
  flush_bytes_ = std::max<size_t>(2 * info_.l2_bytes, size_t(8) << 20);
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FA_CUDA_CHECK(cudaMalloc(&flush_buffer_, flush_bytes_));
}

CudaTimer::~CudaTimer() {
  if (flush_buffer_) cudaFree(flush_buffer_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaTimer::flush(int iteration) {
  // A different byte each time so no level of the memory system can treat the write as redundant.
  FA_CUDA_CHECK(cudaMemsetAsync(flush_buffer_, iteration & 0xFF, flush_bytes_, stream_));
}

std::string CudaTimer::describe() const {
  auto mib = [](size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
  return info_.name + " (cuda:" + std::to_string(info_.index) + ", " + std::to_string(info_.sm_count) + " SMs, L2 " +
         mib(info_.l2_bytes) + "; CUDA events, L2 flushed with a " + mib(flush_bytes_) + " memset before each run)";
}

std::vector<double> CudaTimer::time_ms(const std::function<void(flashattn::Stream)>& run, int warmup, int iters) {
  FA_CUDA_CHECK(cudaSetDevice(info_.index));
  for (int i = 0; i < warmup; ++i) {
    flush(i);
    run(stream_);
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream_));

  EventPairs events(iters);
  const uint64_t hold = std::min<uint64_t>(kMaxHoldNs, kHoldPerRunNs * uint64_t(iters));
  hold_stream_kernel<<<1, 1, 0, stream_>>>(hold);
  FA_CUDA_CHECK_LAUNCH("hold_stream_kernel");
  for (int i = 0; i < iters; ++i) {
    flush(i);
    FA_CUDA_CHECK(cudaEventRecord(events.start(i), stream_));
    run(stream_);
    FA_CUDA_CHECK(cudaEventRecord(events.stop(i), stream_));
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream_));

  std::vector<double> ms(size_t(iters), 0.0);
  for (int i = 0; i < iters; ++i) {
    float elapsed = 0.0f;
    FA_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events.start(i), events.stop(i)));
    ms[size_t(i)] = elapsed;
  }
  return ms;
}

}  // namespace fabench
