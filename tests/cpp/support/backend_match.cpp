#include "backend_match.h"

#include "naive_lowp.h"
#include "outputs_criterion.h"

namespace fa_test {

AttnConfig bucket_config(int bucket, int64_t sq, int64_t sk, bool causal, DType dtype) {
  AttnConfig c;
  c.dtype = dtype;
  c.head_dim = (bucket / 32) % 2 == 0 ? bucket : bucket - 8;
  c.batch = 1;
  c.heads = 2;
  c.heads_k = 1;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.causal = causal;
  return c;
}

void expect_forward_matches_on(const std::string& backend, const AttnConfig& cfg, uint64_t seed) {
  SCOPED_TRACE(backend + " " + cfg.name());
  const AttnInputs in = make_inputs(cfg, seed);
  FwdOutputs got;
  FA_SKIP_IF_UNSUPPORTED(got = run_forward(in, backend, Device::cuda(0)));
  const FwdOutputs ref = reference_forward(in);
  const NaiveOutputs naive = naive_lowp(in, false);
  expect_forward_within_criterion(got, ref, naive, cfg.dtype);
}

void expect_backward_matches_on(const std::string& backend, const AttnConfig& cfg, uint64_t seed, bool deterministic) {
  SCOPED_TRACE(backend + " " + cfg.name() + (deterministic ? " deterministic" : ""));
  const AttnInputs in = make_inputs(cfg, seed);
  BwdOutputs got;
  FA_SKIP_IF_UNSUPPORTED(
      got = run_backward(in, run_forward(in, backend, Device::cuda(0)), backend, Device::cuda(0), deterministic));
  const BwdOutputs ref = reference_backward(in);
  const NaiveOutputs naive = naive_lowp(in, true);
  expect_backward_within_criterion(got, ref, naive, cfg.dtype);
}

}  // namespace fa_test
