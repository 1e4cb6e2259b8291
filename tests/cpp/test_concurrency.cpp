// Several host threads calling forward, backward and forward_kvcache at the same time, each on its own
// data (and, on CUDA, its own stream), get bitwise the results of the same calls made one after another.
// The library keeps no mutable global state (docs/reliability.md): the backend registry is a
// function-local static const, the C API's last error is thread_local, and every scratch buffer belongs to
// one call. Run under ThreadSanitizer (`make test-tsan`), this test also checks for data races between
// the calls, and inside each call between its OpenMP threads.

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attention_case.h"
#include "backend_params.h"
#include "flashattn/flashattn_c.h"
#include "kvcache_case.h"

#if defined(FLASHATTN_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fa_test {
namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 3;

// The outputs of one job as raw bytes, for bitwise comparison.
using Bytes = std::vector<std::vector<uint8_t>>;

void append(Bytes& out, const HostTensor& t) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data());
  out.emplace_back(p, p + t.nbytes());
}

// A stream per job on CUDA (blocking streams: the harness' synchronous copies on the default stream
// order themselves with them); nullptr on the CPU.
class JobStream {
 public:
  explicit JobStream(Device device) {
#if defined(FLASHATTN_WITH_CUDA)
    if (device.type == flashattn::DeviceType::cuda && cudaStreamCreate(&stream_) != cudaSuccess)
      throw std::runtime_error("cudaStreamCreate failed");
#else
    (void)device;
#endif
  }
  ~JobStream() {
#if defined(FLASHATTN_WITH_CUDA)
    if (stream_) cudaStreamDestroy(stream_);
#endif
  }
  JobStream(const JobStream&) = delete;
  JobStream& operator=(const JobStream&) = delete;
  flashattn::Stream get() const { return stream_; }

 private:
#if defined(FLASHATTN_WITH_CUDA)
  cudaStream_t stream_ = nullptr;
#else
  void* stream_ = nullptr;
#endif
};

using Job = std::function<Bytes(flashattn::Stream)>;

// Jobs covering every entry point, layout and engine: dense and varlen forward (tiles and decode rows),
// backward with dropout (deterministic, so CUDA's dQ is bitwise reproducible too), and a KV-cache call that
// appends with rotary into a paged cache.
std::vector<Job> make_jobs(const std::string& backend, Device device) {
  std::vector<Job> jobs;
  AttnConfig dense;
  dense.dtype = DType::bf16;
  dense.batch = 2, dense.seqlen_q = 70, dense.seqlen_k = 90, dense.heads = 4, dense.heads_k = 2;
  dense.causal = true;
  AttnConfig decode = dense;
  decode.dtype = DType::f16;
  decode.seqlen_q = 1, decode.seqlen_k = 700, decode.heads = 8;
  AttnConfig varlen;
  varlen.dtype = DType::f32;
  varlen.varlen_q = {17, 1, 40}, varlen.varlen_k = {30, 64, 40};
  varlen.heads = 4, varlen.heads_k = 1, varlen.head_dim = 32;
  varlen.window_left = 8, varlen.softcap = 20.0f;
  for (const AttnConfig& cfg : {dense, decode, varlen}) {
    auto in = std::make_shared<AttnInputs>(make_inputs(cfg, 77 + jobs.size()));
    jobs.push_back([=](flashattn::Stream s) {
      const FwdOutputs o = run_forward(*in, backend, device, std::nullopt, s);
      Bytes b;
      append(b, o.out);
      append(b, o.lse);
      return b;
    });
  }
  AttnConfig bwd = dense;
  bwd.dtype = DType::f16;
  bwd.dropout_p = 0.2f, bwd.alibi = true;
  auto bwd_in = std::make_shared<AttnInputs>(make_inputs(bwd, 91));
  jobs.push_back([=](flashattn::Stream s) {
    const FwdOutputs f = run_forward(*bwd_in, backend, device, std::nullopt, s);
    const BwdOutputs g = run_backward(*bwd_in, f, backend, device, /*deterministic=*/true, std::nullopt, s);
    Bytes b;
    for (const HostTensor* t : {&f.out, &f.lse, &g.dq, &g.dk, &g.dv}) append(b, *t);
    return b;
  });
  KVConfig kv;
  kv.dtype = DType::bf16;
  kv.batch = 3, kv.seqlen_q = 2, kv.heads = 8, kv.heads_k = 2, kv.head_dim = 64;
  kv.capacity = 96, kv.page_size = 16, kv.cache_seqlens = {10, 50, 0}, kv.seqlen_new = 2;
  kv.rotary_dim = 32, kv.causal = true;
  auto kv_in = std::make_shared<KVInputs>(make_kv_inputs(kv, 92));
  jobs.push_back([=](flashattn::Stream s) {
    const KVOutputs o = run_kvcache(*kv_in, backend, device, s);
    Bytes b;
    for (const HostTensor* t : {&o.out, &o.lse, &o.k_cache, &o.v_cache}) append(b, *t);
    return b;
  });
  return jobs;
}

class Concurrency : public testing::TestWithParam<std::string> {};

TEST_P(Concurrency, ParallelCallsMatchSerialCallsBitwise) {
  const std::string backend = GetParam();
  FA_SKIP_IF_DEVICE_MISSING(backend);
  const Device device = device_of(backend);
  const std::vector<Job> jobs = make_jobs(backend, device);
  std::vector<Bytes> serial(jobs.size());
  std::vector<bool> supported(jobs.size(), true);
  for (size_t j = 0; j < jobs.size(); ++j) {
    JobStream stream(device);
    try {
      serial[j] = jobs[j](stream.get());
    } catch (const flashattn::Error& e) {
      if (e.status() != flashattn::Status::unsupported) throw;
      supported[j] = false;  // e.g. a CUDA kernel without f32: the other jobs still run
    }
  }
  // Thread t runs jobs t, t + 1, ... kRounds times over, so every job runs next to different ones.
  std::vector<std::vector<Bytes>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        JobStream stream(device);
        for (int r = 0; r < kRounds; ++r)
          for (size_t k = 0; k < jobs.size(); ++k) {
            const size_t j = (size_t(t) + k) % jobs.size();
            got[size_t(t)].push_back(supported[j] ? jobs[j](stream.get()) : Bytes{});
          }
      } catch (const std::exception& e) {
        errors[size_t(t)] = e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[size_t(t)], "") << "thread " << t;
    for (size_t n = 0; n < got[size_t(t)].size(); ++n) {
      const size_t j = (size_t(t) + n % jobs.size()) % jobs.size();
      EXPECT_TRUE(got[size_t(t)][n] == serial[j]) << "thread " << t << ", round " << n / jobs.size() << ", job " << j;
    }
  }
}

std::vector<std::string> all_backends() {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) out.push_back(b.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Concurrency, testing::ValuesIn(all_backends()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// The C API's last error belongs to the calling thread: another thread's failures never replace it.
TEST(Concurrency, CApiLastErrorIsPerThread) {
  ASSERT_EQ(flashattn_forward(nullptr, nullptr), FLASHATTN_INVALID_ARGUMENT);
  const std::string mine = flashattn_last_error();
  std::vector<std::string> first(kThreads);
  std::vector<bool> stable(kThreads, true);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      flashattn_fwd_params p;
      flashattn_fwd_params_init(&p);
      p.q.ndim = 1;  // rank 1 where 4 is expected: the message shows this thread's shape [t]
      p.q.shape[0] = t;
      p.q.stride[0] = 1;
      for (int r = 0; r < 200; ++r) {
        const int status = flashattn_forward(&p, nullptr);
        const std::string msg = flashattn_last_error();
        if (r == 0) first[size_t(t)] = msg;
        if (status != FLASHATTN_INVALID_ARGUMENT || msg != first[size_t(t)]) stable[size_t(t)] = false;
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(stable[size_t(t)]) << "thread " << t;
    EXPECT_NE(first[size_t(t)].find("got 1 dims [" + std::to_string(t) + "]"), std::string::npos)
        << "thread " << t << ": " << first[size_t(t)];
  }
  EXPECT_EQ(flashattn_last_error(), mine);
}

}  // namespace
}  // namespace fa_test
