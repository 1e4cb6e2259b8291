#pragma once

// Helpers of the tests that drive a GPU directly (tests/cpp/test_cuda_*.cpp, test_gpu_scale.cpp): the
// skip of a test that needs a visible device, and a CUDA call that must succeed.

#include <gtest/gtest.h>

#include "host_tensor.h"

// Skips the test, naming what was not run, when no CUDA device is visible (or CUDA is not built in).
#define FA_SKIP_WITHOUT_GPU(what) \
  if (!::fa_test::cuda_available()) GTEST_SKIP() << "no CUDA device visible: " << what << " not run"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

namespace fa_test {

// Fails the calling test (a fatal assertion: call it from functions returning void) when `err` is an error.
inline void cuda_ok(cudaError_t err, const char* what) {
  ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

}  // namespace fa_test
#endif
