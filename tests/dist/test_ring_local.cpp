// Context parallelism without MPI: the ring of one (LocalCommunicator) on every dist case, exact
// equality with a plain call where the ring makes a single call, the sharding helpers, and argument
// errors.

#include <gtest/gtest.h>

#include <algorithm>

#include "flashattn/api.h"
#include "flashattn/dist.h"
#include "ring_cases.h"

namespace fa_test {
namespace {

namespace dist = flashattn::dist;

class RingOfOne : public testing::TestWithParam<DistParam> {};

TEST_P(RingOfOne, MatchesReference) {
  dist::LocalCommunicator comm;
  expect_case(DistRun{comm}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, RingOfOne, testing::ValuesIn(dist_params()), dist_param_name);

// Says visibly when no backend can test the ring's backward.
TEST(RingOfOne, BackwardHasABackend) {
  if (dist_backends(true).empty())
    GTEST_SKIP() << "no CPU backend whose backward reads the given softmax_lse: ring backward cases not run";
}

// With one rank and the contiguous layout the ring makes exactly the plain call, and merging a single
// partial (or accumulating a single gradient in fp32) is exact: the results must be bit-identical.
TEST(RingOfOne, ContiguousIsThePlainCall) {
  AttnConfig cfg;
  cfg.dtype = DType::bf16;
  cfg.batch = 2;
  cfg.seqlen_q = cfg.seqlen_k = 48;
  cfg.heads = 4;
  cfg.heads_k = 2;
  cfg.head_dim = 32;
  cfg.causal = true;
  const AttnInputs in = make_inputs(cfg, 99);
  dist::LocalCommunicator comm;
  for (const std::string& backend : dist_backends(false)) {
    const std::vector<std::string> lse_readers = dist_backends(true);
    const bool backward = std::find(lse_readers.begin(), lse_readers.end(), backend) != lse_readers.end();
    const DistCase c{cfg, dist::ShardLayout::contiguous, DistMode::ring, backward};
    const DistOutputs ring = run_distributed(comm, c, in, backend);
    const FwdOutputs plain = run_forward(in, backend, flashattn::Device::cpu());
    EXPECT_TRUE(bitwise_equal(ring.fwd.out, plain.out)) << backend;
    EXPECT_TRUE(bitwise_equal(ring.fwd.lse, plain.lse)) << backend;
    if (!backward) continue;
    const BwdOutputs plain_b = run_backward(in, plain, backend, flashattn::Device::cpu());
    EXPECT_TRUE(bitwise_equal(ring.bwd.dq, plain_b.dq)) << backend;
    EXPECT_TRUE(bitwise_equal(ring.bwd.dk, plain_b.dk)) << backend;
    EXPECT_TRUE(bitwise_equal(ring.bwd.dv, plain_b.dv)) << backend;
  }
}

TEST(LocalCommunicator, ShiftAndAllgatherCopy) {
  dist::LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  const char send[6] = "abcde";
  char recv[6] = {};
  comm.start_ring_shift(send, recv, sizeof send, nullptr)->wait(nullptr);
  EXPECT_STREQ(recv, "abcde");
  char all[6] = {};
  comm.allgather(send, all, sizeof send, nullptr);
  EXPECT_STREQ(all, "abcde");
  // A CUDA device is accepted in builds with CUDA when it is visible (test_ring_cuda.cpp).
  if (!cuda_available()) EXPECT_THROW(dist::LocalCommunicator(flashattn::Device::cuda(0)), flashattn::Error);
  EXPECT_THROW(dist::LocalCommunicator(flashattn::Device::cuda(1000)), flashattn::Error);
}

// shard_tensor then gather_tensor (a ring of one gathers its own shard) restores the full tensor, and
// the zigzag shard of rank 0 of 2 holds chunks 0 and 3 of 4.
TEST(RingShard, ShardAndGatherRoundTrip) {
  dist::ShardSpec spec;
  spec.layout = dist::ShardLayout::zigzag;
  spec.seqlen = 8;
  HostTensor full(DType::f32, {1, 8, 1, 8});
  for (int64_t i = 0; i < full.numel(); ++i) full.set(i, double(i / 8));  // each row holds its position
  const HostTensor mine = shard_of(full, 1, spec, 2, 0);
  std::vector<double> rows;
  for (int64_t r = 0; r < 4; ++r) rows.push_back(mine.get(r * 8));
  EXPECT_EQ(rows, (std::vector<double>{0, 1, 6, 7}));

  dist::LocalCommunicator comm;
  spec.layout = dist::ShardLayout::contiguous;
  HostTensor back(DType::f32, {1, 8, 1, 8});
  back.poison();
  dist::gather_tensor(comm, full.view(), back.view(), 1, spec);
  EXPECT_TRUE(bitwise_equal(back, full));
  HostTensor wrong(DType::f32, {1, 7, 1, 8});
  EXPECT_THROW(dist::gather_tensor(comm, wrong.view(), back.view(), 1, spec), flashattn::Error);
}

class RingErrors : public testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(3);
    q_.fill_normal(rng);
    p_.q = p_.k = p_.v = q_.view();
    p_.out = out_.view();
    p_.softmax_lse = lse_.view();
    spec_.seqlen = 16;
  }
  flashattn::Status status_of(const flashattn::FwdParams& p, std::string* message = nullptr) {
    try {
      dist::ring_forward(comm_, p, spec_);
    } catch (const flashattn::Error& e) {
      if (message) *message = e.what();
      return e.status();
    }
    return flashattn::Status::ok;
  }
  HostTensor q_{DType::f32, {1, 16, 2, 8}}, out_{DType::f32, {1, 16, 2, 8}}, lse_{DType::f32, {1, 2, 16}};
  flashattn::FwdParams p_;
  dist::ShardSpec spec_;
  dist::LocalCommunicator comm_;
};

TEST_F(RingErrors, ValidCallRuns) { EXPECT_EQ(status_of(p_), flashattn::Status::ok); }

TEST_F(RingErrors, DropoutAndAlibiAreUnsupported) {
  flashattn::FwdParams p = p_;
  p.dropout_p = 0.1f;
  std::string msg;
  EXPECT_EQ(status_of(p, &msg), flashattn::Status::unsupported);
  EXPECT_NE(msg.find("dropout_p"), std::string::npos) << msg;
  p = p_;
  HostTensor slopes(DType::f32, {2});
  p.options.alibi_slopes = slopes.view();
  EXPECT_EQ(status_of(p, &msg), flashattn::Status::unsupported);
  EXPECT_NE(msg.find("alibi_slopes"), std::string::npos) << msg;
}

TEST_F(RingErrors, ShapeAndLayoutMistakes) {
  std::string msg;
  spec_.seqlen = 17;  // the shard of a ring of one is the whole sequence
  EXPECT_EQ(status_of(p_, &msg), flashattn::Status::invalid_argument);
  EXPECT_NE(msg.find("q: expected 17 rows"), std::string::npos) << msg;
  spec_.seqlen = 16;
  flashattn::FwdParams p = p_;
  HostTensor cu = i32_tensor({0, 16});
  p.cu_seqlens_q = p.cu_seqlens_k = cu.view();
  EXPECT_EQ(status_of(p, &msg), flashattn::Status::invalid_argument);
  EXPECT_NE(msg.find("cu_seqlens_q"), std::string::npos) << msg;
  p = p_;
  HostTensor bad_out(DType::f32, {1, 16, 2, 16});
  p.out = bad_out.view();
  EXPECT_EQ(status_of(p, &msg), flashattn::Status::invalid_argument);  // flashattn's own validation
  EXPECT_NE(msg.find("out"), std::string::npos) << msg;
}

TEST_F(RingErrors, BackwardRefusesARecomputingBackend) {
  flashattn::BwdParams b;
  static_cast<flashattn::FwdParams&>(b) = p_;
  HostTensor grads[4] = {HostTensor(DType::f32, {1, 16, 2, 8}), HostTensor(DType::f32, {1, 16, 2, 8}),
                         HostTensor(DType::f32, {1, 16, 2, 8}), HostTensor(DType::f32, {1, 16, 2, 8})};
  b.dout = grads[0].view();
  b.dq = grads[1].view();
  b.dk = grads[2].view();
  b.dv = grads[3].view();
  b.options.backend = "cpu_reference";
  try {
    dist::ring_backward(comm_, b, spec_);
    ADD_FAILURE() << "ring_backward ran on cpu_reference";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("cpu_reference"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fa_test
