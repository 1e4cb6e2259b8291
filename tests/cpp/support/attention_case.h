#pragma once

// One attention test case: its configuration, random inputs, and helpers that run it on any backend.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flashattn/api.h"
#include "host_tensor.h"

namespace fa_test {

struct AttnConfig {
  DType dtype = DType::f16;
  int64_t batch = 2, seqlen_q = 64, seqlen_k = 64, heads = 4, heads_k = 4, head_dim = 64;
  // Varlen when non-empty: one length per sequence (batch = size); seqlen_q/k are ignored.
  std::vector<int64_t> varlen_q, varlen_k;
  bool causal = false;
  int window_left = -1, window_right = -1;
  bool alibi = false, alibi_per_batch = false;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 1234, dropout_offset = 0;
  // Varlen forward only. page_size > 0: the call reads K/V from a paged cache of that page size (blocks in
  // shuffled order, unused rows NaN). seqused_k: cu_seqlens_k spans a few NaN keys past each sequence's
  // varlen_k[b] keys, and seqused_k gives varlen_k. The oracle sees only the varlen_k keys, contiguous.
  int64_t page_size = 0;
  bool seqused_k = false;
  // FP8 (dtype fp8_e4m3): random fp32 (B, Hk) descale factors for q, k and v (absent: 1).
  bool descale = false;

  bool varlen() const { return !varlen_q.empty(); }
  bool paged_or_seqused() const { return page_size > 0 || seqused_k; }
  int64_t num_seqs() const { return varlen() ? int64_t(varlen_q.size()) : batch; }
  std::string name() const;
};

struct AttnInputs {
  AttnConfig cfg;
  HostTensor q, k, v, dout;  // dense (B, S, H, D) or varlen (total, H, D)
  HostTensor alibi;          // f32 (H) or (B, H), when cfg.alibi
  HostTensor cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  // What a paged or seqused_k call passes instead of k, v, cu_seqlens_k, max_seqlen_k (absent otherwise).
  HostTensor call_k, call_v, call_cu_seqlens_k, block_table, seqused_k;
  int64_t call_max_seqlen_k = 0;
  HostTensor q_descale, k_descale, v_descale;  // f32 (B, Hk), when cfg.descale
};

AttnInputs make_inputs(const AttnConfig& cfg, uint64_t seed);

// Everything of a call that comes from the config rather than from tensors: max_seqlen_q/k, the
// options (scale, causal, window, softcap) and dropout (p, seed, offset). Tensors, ALiBi slopes and the
// backend are the caller's.
void fill_call_options(flashattn::FwdParams& p, const AttnInputs& in);

struct FwdOutputs {
  HostTensor out, lse;
};
struct BwdOutputs {
  HostTensor dq, dk, dv;
};

// Runs forward/backward of `backend` on `device`: inputs are copied there, outputs are poisoned first
// and copied back. `compute` overrides the dtype of q/k/v/out (used to run the reference in fp32).
// `stream` is the CUDA stream of the call (the copies stay synchronous).
FwdOutputs run_forward(const AttnInputs& in, const std::string& backend, Device device,
                       std::optional<DType> compute = std::nullopt, flashattn::Stream stream = nullptr);
BwdOutputs run_backward(const AttnInputs& in, const FwdOutputs& fwd, const std::string& backend, Device device,
                        bool deterministic = false, std::optional<DType> compute = std::nullopt,
                        flashattn::Stream stream = nullptr);
// run_forward with `call` in place of flashattn::forward (the test drives the call itself).
FwdOutputs run_forward_via(const AttnInputs& in, const std::string& backend, Device device,
                           const std::function<void(const flashattn::FwdParams&)>& call);
// run_backward with `call` in place of flashattn::backward: for tests that drive a backend's internals
// (e.g. a kernel partition the device would not pick) on the same inputs, outputs and checks.
BwdOutputs run_backward_via(const AttnInputs& in, const FwdOutputs& fwd, const std::string& backend, Device device,
                            bool deterministic, const std::function<void(const flashattn::BwdParams&)>& call);

// The fp64 oracle: cpu_reference on inputs upcast to f32 (exact), outputs in f32; a paged or seqused_k
// forward's oracle reads the same keys contiguously (contiguous_keys).
FwdOutputs reference_forward(const AttnInputs& in);
AttnInputs contiguous_keys(const AttnInputs& in);
BwdOutputs reference_backward(const AttnInputs& in);

// The device backends of this build that run on the available hardware.
std::vector<std::string> runnable_backends(flashattn::DeviceType type);
Device device_of(const std::string& backend);

}  // namespace fa_test
