#pragma once

// A CUDA stream for the GPU tests of flashattn::dist, destroyed on every exit path. It is a blocking
// stream: it waits for the legacy default stream, on which the test helpers upload their inputs with
// cudaMemcpy (which may return before a pageable copy has landed).

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace fa_test {

class TestStream {
 public:
  TestStream() {
    const cudaError_t err = cudaStreamCreate(&stream_);
    if (err != cudaSuccess) throw std::runtime_error(std::string("cudaStreamCreate: ") + cudaGetErrorString(err));
  }
  ~TestStream() { cudaStreamDestroy(stream_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace fa_test
