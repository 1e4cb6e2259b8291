#include "ring_cases.h"

#include "criterion.h"
#include "naive_lowp.h"

namespace fa_test {

namespace {

using flashattn::dist::ShardLayout;

AttnConfig dense(DType dtype, int64_t seqlen, int64_t heads, int64_t heads_k, int64_t dim) {
  AttnConfig c;
  c.dtype = dtype;
  c.batch = 2;
  c.seqlen_q = c.seqlen_k = seqlen;
  c.heads = heads;
  c.heads_k = heads_k;
  c.head_dim = dim;
  return c;
}

AttnConfig varlen(DType dtype, std::vector<int64_t> lengths) {
  AttnConfig c = dense(dtype, 0, 4, 2, 32);
  c.varlen_q = c.varlen_k = std::move(lengths);
  return c;
}

}  // namespace

std::vector<DistCase> dist_cases() {
  std::vector<AttnConfig> masks;
  {
    AttnConfig c = dense(DType::bf16, 96, 4, 2, 32);  // GQA 2:1
    c.causal = true;
    masks.push_back(c);
    c.causal = false;
    masks.push_back(c);
  }
  {
    AttnConfig c = dense(DType::f16, 67, 2, 1, 64);  // uneven chunks, MQA
    c.causal = true;
    masks.push_back(c);
  }
  {
    AttnConfig c = dense(DType::f32, 50, 2, 2, 16);  // sliding window straddling block edges
    c.window_left = 7;
    c.window_right = 3;
    masks.push_back(c);
    c.causal = true;  // causal with a left window
    c.window_left = 5;
    c.window_right = -1;
    masks.push_back(c);
  }
  {
    AttnConfig c = dense(DType::bf16, 40, 2, 2, 32);
    c.causal = true;
    c.softcap = 5.0f;
    c.softmax_scale = 0.3f;
    masks.push_back(c);
  }
  {
    AttnConfig c = dense(DType::bf16, 3, 2, 2, 16);  // fewer positions than chunks: some shards empty
    c.causal = true;
    masks.push_back(c);
    c.seqlen_q = c.seqlen_k = 1;
    masks.push_back(c);
  }
  {
    AttnConfig c = varlen(DType::bf16, {37, 64, 5, 1});  // every sequence sharded on its own
    c.causal = true;
    masks.push_back(c);
    c.causal = false;
    c.window_left = 6;
    c.window_right = 2;
    masks.push_back(c);
  }

  std::vector<DistCase> cases;
  for (const AttnConfig& cfg : masks) {
    for (ShardLayout layout : {ShardLayout::zigzag, ShardLayout::contiguous}) {
      for (bool backward : {false, true}) cases.push_back(DistCase{cfg, layout, DistMode::ring, backward});
    }
  }
  // The simple all-gather mode: forward only.
  for (size_t i : {size_t(0), size_t(1), size_t(4), size_t(9)})
    for (ShardLayout layout : {ShardLayout::zigzag, ShardLayout::contiguous})
      cases.push_back(DistCase{masks[i], layout, DistMode::allgather, false});
  return cases;
}

testing::AssertionResult check_distributed(const DistRun& run, const DistCase& c, const std::string& backend,
                                           uint64_t seed) {
  const AttnInputs in = make_inputs(c.cfg, seed);
  const DistOutputs got = run_distributed(run, c, in, backend);
  if (run.comm.rank() != 0) return testing::AssertionSuccess();

  const NaiveOutputs naive = naive_lowp(in, c.backward);
  const FwdOutputs ref = reference_forward(in);
  const DType dt = c.cfg.dtype;
  testing::AssertionResult r = within_criterion("out", got.fwd.out, ref.out.to_double(), naive.out, dt);
  if (r) r = within_criterion("lse", got.fwd.lse, ref.lse.to_double(), naive.lse, DType::f32);
  if (r && c.backward) {
    const BwdOutputs ref_b = reference_backward(in);
    r = within_criterion("dq", got.bwd.dq, ref_b.dq.to_double(), naive.dq, dt);
    if (r) r = within_criterion("dk", got.bwd.dk, ref_b.dk.to_double(), naive.dk, dt);
    if (r) r = within_criterion("dv", got.bwd.dv, ref_b.dv.to_double(), naive.dv, dt);
  }
  return r;
}

void expect_case(const DistRun& run, const DistParam& param) {
  static const std::vector<DistCase> cases = dist_cases();
  const auto& [backend, index] = param;
  try {
    EXPECT_TRUE(check_distributed(run, cases[size_t(index)], backend, 7000 + uint64_t(index)))
        << "ranks: " << run.comm.size();
  } catch (const flashattn::Error& e) {
    if (e.status() == flashattn::Status::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
}

void expect_one_rank_mistake_fails_every_rank(flashattn::dist::Communicator& comm) {
  const int world = comm.size(), rank = comm.rank();
  flashattn::dist::ShardSpec spec;
  spec.layout = flashattn::dist::ShardLayout::contiguous;
  spec.seqlen = 8 * world;
  const int64_t rows = 8 + (rank == world - 1 ? 1 : 0);
  HostTensor q(DType::bf16, {1, rows, 1, 64}), out(DType::bf16, {1, rows, 1, 64});
  std::mt19937_64 rng(1);
  q.fill_normal(rng);
  const DeviceTensor d_q(q, comm.device()), d_out(out, comm.device());
  flashattn::FwdParams p;
  p.q = p.k = p.v = d_q.view();
  p.out = d_out.view();
  p.options.causal = true;
  try {
    flashattn::dist::ring_forward(comm, p, spec);
    ADD_FAILURE() << "ring_forward accepted a shard of the wrong length";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::invalid_argument) << e.what();
    const std::string msg = e.what();
    if (rank == world - 1) {
      EXPECT_NE(msg.find("q: expected 8 rows"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("rank " + std::to_string(world - 1) + " rejected the call"), std::string::npos) << msg;
    }
  }
}

std::vector<std::string> dist_backends(bool backward, flashattn::DeviceType device) {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) {
    if (b.device != device) continue;
    if (backward && b.name == "cpu_reference") continue;
    out.push_back(b.name);
  }
  return out;
}

std::vector<DistParam> dist_params(flashattn::DeviceType device) {
  std::vector<DistParam> out;
  const std::vector<DistCase> cases = dist_cases();
  for (int i = 0; i < int(cases.size()); ++i)
    for (const std::string& backend : dist_backends(cases[size_t(i)].backward, device)) out.emplace_back(backend, i);
  return out;
}

std::string dist_param_name(const testing::TestParamInfo<DistParam>& info) {
  const int index = std::get<1>(info.param);
  return std::get<0>(info.param) + "_" + std::to_string(index) + "_" + dist_cases()[size_t(index)].name();
}

}  // namespace fa_test
