// GPU-only checks of the CUDA ladder backends (cuda_naive, cuda_fa1_simt, cuda_fa2_simt) beyond the
// shared catalogue: shapes on either side of every tile edge, a call on a non-default stream that must
// be ordered by that stream alone, and (cuda_fa2_simt) a problem whose q holds more than 2^31 elements.
// Every test skips, with the reason, when no CUDA device is visible.

#include <gtest/gtest.h>

#include "attention_case.h"
#include "criterion.h"
#include "naive_lowp.h"

#if defined(FLASHATTN_WITH_CUDA)

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/convert.h"
#include "cuda/ladder/simt_tile.h"

namespace fa_test {
namespace {

namespace ladder = flashattn::detail::cuda::ladder;

#define FA_SKIP_WITHOUT_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible"

#define FA_CUDA_OK(expr, what)                                                      \
  do {                                                                              \
    const cudaError_t fa_err_ = (expr);                                             \
    ASSERT_EQ(fa_err_, cudaSuccess) << what << ": " << cudaGetErrorString(fa_err_); \
  } while (0)

// Runs `cfg` on `backend` and checks out and LSE against the oracle, and dq, dk, dv too when the backend
// has a backward (computed from its own forward, as in training). An unsupported call fails: every
// ladder backend is expected to run every shape used here.
void expect_matches_reference(const std::string& backend, const AttnConfig& cfg, uint64_t seed) {
  SCOPED_TRACE(backend + " " + cfg.name());
  const AttnInputs in = make_inputs(cfg, seed);
  const FwdOutputs ref = reference_forward(in);
  const bool backward = backend == "cuda_fa2_simt";
  const NaiveOutputs naive = naive_lowp(in, backward);
  const FwdOutputs got = run_forward(in, backend, Device::cuda(0));
  EXPECT_TRUE(within_criterion("out", got.out, ref.out.to_double(), naive.out, cfg.dtype));
  EXPECT_TRUE(within_criterion("softmax_lse", got.lse, ref.lse.to_double(), naive.lse, DType::f32));
  if (!backward) return;
  const BwdOutputs grads = run_backward(in, got, backend, Device::cuda(0));
  const BwdOutputs bref = reference_backward(in);
  EXPECT_TRUE(within_criterion("dq", grads.dq, bref.dq.to_double(), naive.dq, cfg.dtype));
  EXPECT_TRUE(within_criterion("dk", grads.dk, bref.dk.to_double(), naive.dk, cfg.dtype));
  EXPECT_TRUE(within_criterion("dv", grads.dv, bref.dv.to_double(), naive.dv, cfg.dtype));
}

// ---------------------------------------------------------------------------------------------------
// Tile edges: sequence lengths on either side of the query-tile rows and of the K/V-tile keys (the
// naive backend's products use 16 x 16 tiles), for head dims that fill their bucket and that pad it. Both
// lengths take both kinds of edge: the backward's dK/dV kernel tiles keys by `rows` and queries by `keys`.

using SweepParam = std::tuple<std::string, int>;  // backend, head dim

class CudaLadderTileEdges : public testing::TestWithParam<SweepParam> {};

TEST_P(CudaLadderTileEdges, MatchesReference) {
  FA_SKIP_WITHOUT_CUDA();
  const auto& [backend, head_dim] = GetParam();
  constexpr int kNaiveTile = 16;
  const ladder::SimtTile tile = ladder::simt_tile(ladder::head_dim_bucket(head_dim));
  const int64_t rows = backend == "cuda_naive" ? kNaiveTile : tile.rows;
  const int64_t keys = backend == "cuda_naive" ? kNaiveTile : tile.keys;
  const DType dtypes[] = {DType::bf16, DType::f16, DType::f32};
  uint64_t seed = 900 + uint64_t(head_dim);
  int n = 0;
  for (int64_t sq : {int64_t(1), rows - 1, rows, rows + 1, keys + 1, 2 * rows + 1})
    for (int64_t sk : {rows - 1, rows + 1, keys - 1, keys, keys + 1, 2 * keys + 1})
      for (bool causal : {false, true}) {
        AttnConfig c;
        c.dtype = dtypes[n++ % 3];
        c.batch = 2;
        c.heads = 4;
        c.heads_k = 2;
        c.head_dim = head_dim;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.causal = causal;
        expect_matches_reference(backend, c, seed++);
      }
  // Several tiles with a window that hides whole K/V tiles from some query tiles, plus dropout and ALiBi.
  AttnConfig c;
  c.dtype = DType::bf16;
  c.batch = 2;
  c.heads = 4;
  c.heads_k = 1;
  c.head_dim = head_dim;
  c.seqlen_q = 3 * rows + 1;
  c.seqlen_k = 3 * keys + 5;
  c.window_left = int(keys / 2);
  c.window_right = 3;
  c.alibi = true;
  c.dropout_p = 0.15f;
  expect_matches_reference(backend, c, seed++);
  c.varlen_q = {rows + 1, 0, 2 * rows - 1};
  c.varlen_k = {keys - 1, 3, 2 * keys + 1};
  c.window_left = c.window_right = -1;
  c.causal = true;
  expect_matches_reference(backend, c, seed++);
}

INSTANTIATE_TEST_SUITE_P(Ladder, CudaLadderTileEdges,
                         testing::Combine(testing::Values("cuda_naive", "cuda_fa1_simt", "cuda_fa2_simt"),
                                          testing::Values(32, 40, 64, 128, 200, 256)),
                         [](const testing::TestParamInfo<SweepParam>& info) {
                           return std::get<0>(info.param) + "_d" + std::to_string(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------------
// Non-default stream. The call goes on a non-blocking stream that is held shut by a host callback, with
// the upload of q queued behind the callback; q itself starts as NaN. A backend that launched on
// another stream would read the NaN q (the legacy stream is synchronised before the gate opens), and
// one that synchronised the stream or the device would stall until the gate gives up.

struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> gave_up{false};
};

void CUDART_CB wait_for_gate(void* arg) {
  Gate* gate = static_cast<Gate*>(arg);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!gate->open.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate->gave_up = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Owns the stream and makes sure the callback has finished with the gate before either goes away.
struct GatedStream {
  cudaStream_t stream = nullptr;
  Gate gate;
  GatedStream() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~GatedStream() {
    gate.open = true;
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
};

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes ? bytes : 1) != cudaSuccess) {
      ptr = nullptr;
      cudaGetLastError();  // clear it: a later launch check must not report this failure
    }
  }
  ~DeviceBuffer() { cudaFree(ptr); }
};

class CudaLadderStream : public testing::TestWithParam<std::string> {};

TEST_P(CudaLadderStream, OrderedByTheCallersStreamOnly) {
  FA_SKIP_WITHOUT_CUDA();
  const std::string& backend = GetParam();
  AttnConfig cfg;
  cfg.dtype = DType::bf16;
  cfg.batch = 2;
  cfg.seqlen_q = 100;
  cfg.seqlen_k = 90;
  cfg.heads = 4;
  cfg.heads_k = 2;
  cfg.head_dim = 64;
  cfg.causal = true;
  const AttnInputs in = make_inputs(cfg, 77);
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);

  const Device dev = Device::cuda(0);
  FA_CUDA_OK(cudaSetDevice(0), "cudaSetDevice");
  DeviceTensor k(in.k, dev), v(in.v, dev);
  HostTensor out(cfg.dtype, in.q.shape()), lse(DType::f32, {cfg.batch, cfg.heads, cfg.seqlen_q});
  out.poison();
  lse.poison();
  DeviceTensor d_out(out, dev), d_lse(lse, dev);
  DeviceBuffer q_dev(in.q.nbytes());
  FA_CUDA_OK(cudaMemset(q_dev.ptr, 0xFF, in.q.nbytes()), "cudaMemset q to NaN");
  void* q_pinned = nullptr;
  FA_CUDA_OK(cudaMallocHost(&q_pinned, in.q.nbytes()), "cudaMallocHost");
  std::memcpy(q_pinned, in.q.data(), in.q.nbytes());

  {
    GatedStream gs;
    ASSERT_NE(gs.stream, nullptr);
    FA_CUDA_OK(cudaLaunchHostFunc(gs.stream, wait_for_gate, &gs.gate), "cudaLaunchHostFunc");
    FA_CUDA_OK(cudaMemcpyAsync(q_dev.ptr, q_pinned, in.q.nbytes(), cudaMemcpyHostToDevice, gs.stream), "upload q");

    flashattn::FwdParams p;
    p.q = Tensor::contiguous(q_dev.ptr, cfg.dtype, {cfg.batch, cfg.seqlen_q, cfg.heads, cfg.head_dim}, dev);
    p.k = k.view();
    p.v = v.view();
    p.out = d_out.view();
    p.softmax_lse = d_lse.view();
    p.options.causal = true;
    p.options.backend = backend;
    flashattn::forward(p, gs.stream);

    EXPECT_EQ(cudaStreamQuery(gs.stream), cudaErrorNotReady) << "the stream ran before its gate opened";
    cudaGetLastError();  // "not ready" is an answer, not an error to leave behind for later launch checks
    FA_CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy), "synchronise the legacy stream");
    gs.gate.open = true;
    FA_CUDA_OK(cudaStreamSynchronize(gs.stream), "synchronise the call's stream");
    EXPECT_FALSE(gs.gate.gave_up.load()) << backend << " waited for its own stream (or the device) to drain";
  }
  cudaFreeHost(q_pinned);
  EXPECT_TRUE(within_criterion("out", d_out.download(), ref.out.to_double(), naive.out, cfg.dtype));
  EXPECT_TRUE(within_criterion("softmax_lse", d_lse.download(), ref.lse.to_double(), naive.lse, DType::f32));
}

INSTANTIATE_TEST_SUITE_P(Ladder, CudaLadderStream, testing::Values("cuda_naive", "cuda_fa1_simt", "cuda_fa2_simt"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// ---------------------------------------------------------------------------------------------------
// 64-bit offsets: every (B, S, H, D) tensor of 16385 x 64 x 16 x 128 bf16 elements (2^31 + 2^17 each,
// 4.3 GB), so the last sequence starts exactly at element 2^31. Forward, then backward (8 such tensors,
// 34 GB). Inputs are a hash of the element index, cheap to regenerate for the slices the oracle checks:
// the first sequences and those on either side of element 2^31.

constexpr int64_t kBigBatch = 16385, kBigSeq = 64, kBigHeads = 16, kBigDim = 128;
constexpr int64_t kBigPerBatch = kBigSeq * kBigHeads * kBigDim;
constexpr int64_t kBigElems = kBigBatch * kBigPerBatch;
static_assert(kBigElems > (int64_t(1) << 31), "the point of the test");
enum BigTensor : uint64_t { kBigQ = 1, kBigK, kBigV, kBigDout };

// A value in [-2, 2) rounded to bf16, from (tensor, element index) alone.
uint16_t hashed_bf16(uint64_t tensor, uint64_t index) {
  uint64_t z = index * 0x9E3779B97F4A7C15ull + tensor * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return flashattn::detail::float_to_bf16(4.0f * u - 2.0f);
}

void fill_hashed(std::vector<uint16_t>& dst, uint64_t tensor) {
  const int64_t n = int64_t(dst.size());
  const int threads = int(std::max(1u, std::min(32u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i)
        dst[size_t(i)] = hashed_bf16(tensor, uint64_t(i));
    });
  for (std::thread& th : pool) th.join();
}

HostTensor hashed_slice(uint64_t tensor, int64_t batch) {
  HostTensor t(DType::bf16, {1, kBigSeq, kBigHeads, kBigDim});
  uint16_t* dst = static_cast<uint16_t*>(t.data());
  for (int64_t i = 0; i < kBigPerBatch; ++i) dst[i] = hashed_bf16(tensor, uint64_t(batch * kBigPerBatch + i));
  return t;
}

// Sequence b of a big (B, S, H, D) bf16 tensor, or of the (B, H, S) fp32 LSE, copied to the host.
HostTensor download_slice(const void* big, int64_t b) {
  HostTensor t(DType::bf16, {1, kBigSeq, kBigHeads, kBigDim});
  EXPECT_EQ(
      cudaMemcpy(t.data(), static_cast<const uint16_t*>(big) + b * kBigPerBatch, t.nbytes(), cudaMemcpyDeviceToHost),
      cudaSuccess);
  return t;
}
HostTensor download_lse_slice(const void* lse, int64_t b) {
  HostTensor t(DType::f32, {1, kBigHeads, kBigSeq});
  EXPECT_EQ(cudaMemcpy(t.data(), static_cast<const float*>(lse) + b * kBigHeads * kBigSeq, t.nbytes(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return t;
}

TEST(CudaLadderLargeOffsets, Fa2SimtBeyond2To31Elements) {
  FA_SKIP_WITHOUT_CUDA();
  const size_t bytes = size_t(kBigElems) * 2;
  const size_t lse_bytes = size_t(kBigBatch * kBigHeads * kBigSeq) * sizeof(float);
  FA_CUDA_OK(cudaSetDevice(0), "cudaSetDevice");
  size_t free_bytes = 0, total_bytes = 0;
  FA_CUDA_OK(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const size_t needed = 8 * bytes + lse_bytes + (size_t(1) << 30);  // q k v out dout dq dk dv, lse, slack
  if (free_bytes < needed)
    GTEST_SKIP() << "needs " << needed / 1e9 << " GB of device memory, " << free_bytes / 1e9 << " free";

  DeviceBuffer q(bytes), k(bytes), v(bytes), out(bytes), lse(lse_bytes), dout(bytes), dq(bytes), dk(bytes), dv(bytes);
  for (const DeviceBuffer* buf : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv})
    ASSERT_NE(buf->ptr, nullptr) << "cudaMalloc of the 4.3 GB tensors failed";
  {
    std::vector<uint16_t> host(static_cast<size_t>(kBigElems));
    const std::pair<void*, uint64_t> uploads[] = {{q.ptr, kBigQ}, {k.ptr, kBigK}, {v.ptr, kBigV}, {dout.ptr, kBigDout}};
    for (const auto& [dst, tensor] : uploads) {
      fill_hashed(host, tensor);
      FA_CUDA_OK(cudaMemcpy(dst, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
    }
  }
  // Poison every output: 0xFFFF is a bf16 NaN, 0xFFFFFFFF an fp32 one.
  for (const DeviceBuffer* buf : {&out, &dq, &dk, &dv}) FA_CUDA_OK(cudaMemset(buf->ptr, 0xFF, bytes), "poison");
  FA_CUDA_OK(cudaMemset(lse.ptr, 0xFF, lse_bytes), "poison lse");

  const Device dev = Device::cuda(0);
  const auto big = [&](const DeviceBuffer& buf) {
    return Tensor::contiguous(buf.ptr, DType::bf16, {kBigBatch, kBigSeq, kBigHeads, kBigDim}, dev);
  };
  flashattn::BwdParams p;
  p.q = big(q);
  p.k = big(k);
  p.v = big(v);
  p.out = big(out);
  p.softmax_lse = Tensor::contiguous(lse.ptr, DType::f32, {kBigBatch, kBigHeads, kBigSeq}, dev);
  p.options.causal = true;
  p.options.backend = "cuda_fa2_simt";
  flashattn::forward(p);
  FA_CUDA_OK(cudaDeviceSynchronize(), "forward");
  p.dout = big(dout);
  p.dq = big(dq);
  p.dk = big(dk);
  p.dv = big(dv);
  flashattn::backward(p);
  FA_CUDA_OK(cudaDeviceSynchronize(), "backward");

  AttnConfig cfg;
  cfg.dtype = DType::bf16;
  cfg.batch = 1;
  cfg.seqlen_q = cfg.seqlen_k = kBigSeq;
  cfg.heads = cfg.heads_k = kBigHeads;
  cfg.head_dim = kBigDim;
  cfg.causal = true;
  for (int64_t b : {int64_t(0), int64_t(1), int64_t(8191), int64_t(16383), int64_t(16384)}) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    AttnInputs in;
    in.cfg = cfg;
    in.q = hashed_slice(kBigQ, b);
    in.k = hashed_slice(kBigK, b);
    in.v = hashed_slice(kBigV, b);
    in.dout = hashed_slice(kBigDout, b);
    const FwdOutputs ref = reference_forward(in);
    const BwdOutputs bref = reference_backward(in);
    const NaiveOutputs naive = naive_lowp(in, true);
    EXPECT_TRUE(within_criterion("out", download_slice(out.ptr, b), ref.out.to_double(), naive.out, DType::bf16));
    EXPECT_TRUE(
        within_criterion("softmax_lse", download_lse_slice(lse.ptr, b), ref.lse.to_double(), naive.lse, DType::f32));
    EXPECT_TRUE(within_criterion("dq", download_slice(dq.ptr, b), bref.dq.to_double(), naive.dq, DType::bf16));
    EXPECT_TRUE(within_criterion("dk", download_slice(dk.ptr, b), bref.dk.to_double(), naive.dk, DType::bf16));
    EXPECT_TRUE(within_criterion("dv", download_slice(dv.ptr, b), bref.dv.to_double(), naive.dv, DType::bf16));
  }
}

}  // namespace
}  // namespace fa_test

#else

TEST(CudaLadder, NeedsCuda) { GTEST_SKIP() << "built without CUDA: the CUDA ladder tests do not apply"; }

#endif
