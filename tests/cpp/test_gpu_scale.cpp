// Scale on the GPU (docs/reliability.md): tensors of more than 2^31 elements, whose element offsets only
// fit in 64 bits, and the largest head dim at a sequence length of 2^20. Each test allocates tens of
// GB, so they are named GpuScale.* and run on their own (scripts/gpu-check.sh, step scale); without a
// device they skip.
//
// Inputs are a hash of each element's global index, generated on the host in parallel and uploaded, so
// every batch (or row) holds different data and an offset that wraps at 2^31 or 2^32 reads the wrong
// values. Checking everything against the fp64 reference would take hours on the host: a few batches (or
// the last query rows, under a bottom-right causal mask) are sliced out and checked under the usual
// criterion, among them those that lie past element 2^31.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <thread>
#include <vector>

#include "attention_case.h"
#include "criterion.h"
#include "gpu_test.h"
#include "naive_lowp.h"
#include "outputs_criterion.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "common/convert.h"

namespace fa_test {
namespace {

constexpr int64_t kInt32Elements = int64_t(1) << 31;

// A value in [-1, 1) from (tensor, element index): splitmix64.
float hashed_value(uint64_t tensor, int64_t index) {
  uint64_t z = tensor * 0x9E3779B97F4A7C15ull + uint64_t(index) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(double(z >> 40) / double(1 << 23)) - 1.0f;
}

// Device memory freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// Runs body(i) for i in [0, n) on all host cores.
template <typename Body>
void parallel_for(int64_t n, const Body& body) {
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) body(i);
    });
  for (std::thread& th : pool) th.join();
}

// A bf16 tensor of `elements` hashed values (tensor id `tensor`) on the device, generated in chunks.
void upload_hashed(void* dst, int64_t elements, uint64_t tensor) {
  constexpr int64_t kChunk = int64_t(1) << 28;
  std::vector<uint16_t> host(size_t(std::min(elements, kChunk)));
  for (int64_t begin = 0; begin < elements; begin += kChunk) {
    const int64_t n = std::min(kChunk, elements - begin);
    parallel_for(
        n, [&](int64_t i) { host[size_t(i)] = flashattn::detail::float_to_bf16(hashed_value(tensor, begin + i)); });
    cuda_ok(cudaMemcpy(static_cast<uint16_t*>(dst) + begin, host.data(), size_t(n) * 2, cudaMemcpyHostToDevice),
            "upload");
  }
}

// The host copy (bf16) of elements [first, first + t.numel()) of hashed tensor `tensor`.
void fill_hashed(HostTensor& t, uint64_t tensor, int64_t first) {
  ASSERT_EQ(t.dtype(), DType::bf16);
  auto* data = static_cast<uint16_t*>(t.data());
  parallel_for(t.numel(),
               [&](int64_t i) { data[i] = flashattn::detail::float_to_bf16(hashed_value(tensor, first + i)); });
}

// Elements [first, first + t.numel()) of a device bf16 (or f32 for LSE) tensor into t.
void download(HostTensor& t, const void* src, int64_t first) {
  const size_t elem = t.dtype() == DType::f32 ? 4 : 2;
  cuda_ok(
      cudaMemcpy(t.data(), static_cast<const uint8_t*>(src) + size_t(first) * elem, t.nbytes(), cudaMemcpyDeviceToHost),
      "download");
}

Tensor cuda_view(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return Tensor::contiguous(data, dtype, shape, flashattn::Device::cuda(0));
}

enum Role : uint64_t { kQ = 1, kK, kV, kDout };

// Prints the seconds since the previous mark: where a test of this size spends its time.
class PhaseClock {
 public:
  void mark(const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    std::printf("[ phase    ] %s: %.1f s\n", phase, std::chrono::duration<double>(now - last_).count());
    std::fflush(stdout);
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// (B, S, H, D) bf16 with B * S * H * D > 2^31: forward and backward on the automatic backend, batches
// 0, B/2 and B-1 (the last lies wholly past element 2^31) checked against the reference.
TEST(GpuScale, DenseTensorsBeyondInt32Elements) {
  FA_SKIP_WITHOUT_GPU("GPU scale tests");
  const int64_t B = 8200, S = 1024, H = 2, D = 128;
  const int64_t elements = B * S * H * D, per_batch = S * H * D;
  ASSERT_GT(elements, kInt32Elements);
  ASSERT_GE((B - 1) * per_batch, kInt32Elements);
  const size_t bytes = size_t(elements) * 2, lse_bytes = size_t(B * H * S) * 4;
  DeviceBuffer q(bytes), k(bytes), v(bytes), out(bytes), dout(bytes), dq(bytes), dk(bytes), dv(bytes), lse(lse_bytes);
  for (const DeviceBuffer* b : {&q, &k, &v, &out, &dout, &dq, &dk, &dv, &lse})
    if (b->get() == nullptr) GTEST_SKIP() << "not enough device memory for 9 tensors of up to " << bytes << " bytes";
  upload_hashed(q.get(), elements, kQ);
  upload_hashed(k.get(), elements, kK);
  upload_hashed(v.get(), elements, kV);
  upload_hashed(dout.get(), elements, kDout);

  flashattn::BwdParams p;
  p.q = cuda_view(q.get(), DType::bf16, {B, S, H, D});
  p.k = cuda_view(k.get(), DType::bf16, {B, S, H, D});
  p.v = cuda_view(v.get(), DType::bf16, {B, S, H, D});
  p.out = cuda_view(out.get(), DType::bf16, {B, S, H, D});
  p.softmax_lse = cuda_view(lse.get(), DType::f32, {B, H, S});
  p.dout = cuda_view(dout.get(), DType::bf16, {B, S, H, D});
  p.dq = cuda_view(dq.get(), DType::bf16, {B, S, H, D});
  p.dk = cuda_view(dk.get(), DType::bf16, {B, S, H, D});
  p.dv = cuda_view(dv.get(), DType::bf16, {B, S, H, D});
  p.options.causal = true;
  flashattn::forward(p);
  flashattn::backward(p);
  cuda_ok(cudaDeviceSynchronize(), "forward + backward");

  AttnConfig cfg;
  cfg.dtype = DType::bf16;
  cfg.batch = 1, cfg.seqlen_q = S, cfg.seqlen_k = S, cfg.heads = H, cfg.heads_k = H, cfg.head_dim = D;
  cfg.causal = true;
  for (int64_t b : {int64_t(0), B / 2, B - 1}) {
    SCOPED_TRACE("batch " + std::to_string(b));
    AttnInputs in = make_inputs(cfg, 1);
    const int64_t first = b * per_batch;
    fill_hashed(in.q, kQ, first);
    fill_hashed(in.k, kK, first);
    fill_hashed(in.v, kV, first);
    fill_hashed(in.dout, kDout, first);
    FwdOutputs got{HostTensor(DType::bf16, {1, S, H, D}), HostTensor(DType::f32, {1, H, S})};
    BwdOutputs grads{HostTensor(DType::bf16, {1, S, H, D}), HostTensor(DType::bf16, {1, S, H, D}),
                     HostTensor(DType::bf16, {1, S, H, D})};
    download(got.out, out.get(), first);
    download(got.lse, lse.get(), b * H * S);
    download(grads.dq, dq.get(), first);
    download(grads.dk, dk.get(), first);
    download(grads.dv, dv.get(), first);
    const NaiveOutputs naive = naive_lowp(in, true);
    expect_forward_within_criterion(got, reference_forward(in), naive, DType::bf16);
    expect_backward_within_criterion(grads, reference_backward(in), naive, DType::bf16);
  }
}

// Head dim 256 at 2^20 keys (one sequence, one head pair, causal): the longest row of the largest head
// dim that the test budget allows (4 * S^2 * D * H / 2 = 1.1e15 flops, seconds on an H200; the memory
// would hold ~40x more). The last query rows see every key under the bottom-right mask, so a slice of
// them against all of k and v is checked (the host reference of 8 rows x 2^20 keys takes seconds).
TEST(GpuScale, HeadDim256AtMillionTokens) {
  FA_SKIP_WITHOUT_GPU("GPU scale tests");
  const int64_t S = int64_t(1) << 20, H = 2, Hk = 1, D = 256, rows = 8;
  const size_t q_bytes = size_t(S * H * D) * 2, kv_bytes = size_t(S * Hk * D) * 2;
  DeviceBuffer q(q_bytes), k(kv_bytes), v(kv_bytes), out(q_bytes), lse(size_t(H * S) * 4);
  for (const DeviceBuffer* b : {&q, &k, &v, &out, &lse})
    if (b->get() == nullptr) GTEST_SKIP() << "not enough device memory";
  PhaseClock clock;
  upload_hashed(q.get(), S * H * D, kQ);
  upload_hashed(k.get(), S * Hk * D, kK);
  upload_hashed(v.get(), S * Hk * D, kV);
  clock.mark("upload");

  flashattn::FwdParams p;
  p.q = cuda_view(q.get(), DType::bf16, {1, S, H, D});
  p.k = cuda_view(k.get(), DType::bf16, {1, S, Hk, D});
  p.v = cuda_view(v.get(), DType::bf16, {1, S, Hk, D});
  p.out = cuda_view(out.get(), DType::bf16, {1, S, H, D});
  p.softmax_lse = cuda_view(lse.get(), DType::f32, {1, H, S});
  p.options.causal = true;
  flashattn::forward(p);
  cuda_ok(cudaDeviceSynchronize(), "forward");
  clock.mark("forward on the GPU");

  // The slice's inputs, built directly (make_inputs would first draw 2^29 random values).
  AttnInputs in;
  in.cfg.dtype = DType::bf16;
  in.cfg.batch = 1, in.cfg.seqlen_q = rows, in.cfg.seqlen_k = S, in.cfg.heads = H, in.cfg.heads_k = Hk;
  in.cfg.head_dim = D, in.cfg.causal = true;
  in.q = HostTensor(DType::bf16, {1, rows, H, D});
  in.k = HostTensor(DType::bf16, {1, S, Hk, D});
  in.v = HostTensor(DType::bf16, {1, S, Hk, D});
  in.dout = HostTensor(DType::bf16, {1, rows, H, D});
  fill_hashed(in.q, kQ, (S - rows) * H * D);
  fill_hashed(in.k, kK, 0);
  fill_hashed(in.v, kV, 0);
  FwdOutputs got{HostTensor(DType::bf16, {1, rows, H, D}), HostTensor(DType::f32, {1, H, rows})};
  download(got.out, out.get(), (S - rows) * H * D);
  for (int64_t h = 0; h < H; ++h)
    cuda_ok(
        cudaMemcpy(static_cast<float*>(got.lse.data()) + h * rows,
                   static_cast<const float*>(lse.get()) + h * S + (S - rows), size_t(rows) * 4, cudaMemcpyDeviceToHost),
        "download lse");
  clock.mark("host inputs and download");
  const FwdOutputs ref = reference_forward(in);
  clock.mark("fp64 reference");
  const NaiveOutputs naive = naive_lowp(in, false);
  clock.mark("naive bf16 bound");
  expect_forward_within_criterion(got, ref, naive, DType::bf16);
}

}  // namespace
}  // namespace fa_test

#endif  // FLASHATTN_WITH_CUDA
