#pragma once

// Head dims that are not multiples of 8 on backends whose kernels need one (Backend::any_head_dim false:
// the CUDA kernels move rows in 16-byte vectors and tile the head dim in multiples of 8). As flash-attn
// 2.8 does, the call runs on copies padded with zeros to the next multiple of 8: zero columns add nothing
// to q.k, and the output's extra columns (P times V's zero columns) are dropped. The softmax scale is the
// caller's (1/sqrt of the caller's head dim by default: validation computed it before padding), and
// rotary_dim keeps its meaning (the first rotary_dim columns). A head dim that is already a multiple of 8
// never copies.
//
// Every head_dim-wide tensor of the problem is one (batches, rows, heads, head_dim) region with the
// caller's strides; its padded copy is dense (batches, rows, heads, padded) in one workspace. Inputs are
// copied in (tail zeroed), outputs copied out (first head_dim columns). A KV cache that the call appends
// to is both: the whole cache goes in and comes back, as in flash-attn, whose C++ kvcache path pads the
// same way (docs/semantics.md says what this costs).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/backend.h"
#include "api/problem.h"

namespace flashattn::detail {

constexpr int64_t kPadMultiple = 8;
constexpr int64_t padded_head_dim(int64_t head_dim) {
  return (head_dim + kPadMultiple - 1) / kPadMultiple * kPadMultiple;
}
// Whether `b` runs a call of this head dim through padded copies.
inline bool needs_head_dim_pad(const Backend& b, int64_t head_dim) {
  return !b.any_head_dim && head_dim % kPadMultiple != 0;
}

// One head_dim-wide tensor of a call: the caller's view and where its dense padded copy lives.
struct PadRegion {
  RowsView caller;
  int64_t batches = 0, rows = 0, heads = 0;
  size_t offset = 0;      // bytes from the workspace base
  bool copy_in = false;   // an input (or a cache appended to): padded copy made before the call
  bool copy_out = false;  // written by the call: its first head_dim columns copied back after
  int64_t elements(int64_t dim) const { return batches * rows * heads * dim; }
};

struct PadPlan {
  DType dtype = DType::f32;
  int64_t head_dim = 0, padded = 0;
  std::vector<PadRegion> regions;
  size_t workspace_bytes = 0;
};

// Regions start on this boundary (the CUDA kernels' 16-byte loads, with room to spare).
constexpr size_t kPadAlignment = 256;

// A problem rewritten to padded views, with the plan that fills and drains them. `problem`'s padded views
// point into a workspace at nullptr until bind_workspace() moves them to a real one, so that an unbound
// copy can answer supports_* without allocating.
template <typename Problem>
struct PaddedCall {
  Problem problem;
  PadPlan plan;
};

// Why a call cannot be padded ("" when it can): pad_call refuses calls that mix element sizes (FP8).
std::string pad_unsupported_reason(const FwdProblem& p);
std::string pad_unsupported_reason(const BwdProblem& p);
std::string pad_unsupported_reason(const KVCacheProblem& p);
PaddedCall<FwdProblem> pad_call(const FwdProblem& p);
PaddedCall<BwdProblem> pad_call(const BwdProblem& p);
PaddedCall<KVCacheProblem> pad_call(const KVCacheProblem& p);
void bind_workspace(PaddedCall<FwdProblem>& call, void* base);
void bind_workspace(PaddedCall<BwdProblem>& call, void* base);
void bind_workspace(PaddedCall<KVCacheProblem>& call, void* base);

// The copies of a plan on the call's device, in the call's stream order.
class PadCopier {
 public:
  virtual ~PadCopier() = default;
  // Workspace of `bytes` (kPadAlignment-aligned) that lives as long as the copier.
  virtual void* allocate(size_t bytes) = 0;
  // Region r of the caller's tensor into its dense padded copy at `dst`, zeros in columns [head_dim, padded).
  virtual void pad(const PadPlan& plan, const PadRegion& r, void* dst) = 0;
  // The first head_dim columns of the padded copy at `src` back into the caller's tensor.
  virtual void unpad(const PadPlan& plan, const PadRegion& r, const void* src) = 0;
};

// Plain loops on host memory: a CPU backend that needed padding would use it, and tests drive the padding
// path through it on the host.
std::unique_ptr<PadCopier> make_host_pad_copier();
#if defined(FLASHATTN_WITH_CUDA)
// Stream-ordered copies (head_dim_pad_cuda.cu) with workspace from cuda::Workspace: the caller's allocator
// when given (a KV-cache call's workspace_allocator), else cudaMallocAsync.
std::unique_ptr<PadCopier> make_cuda_pad_copier(Device device, Stream stream,
                                                void* (*allocator)(size_t, void*) = nullptr, void* context = nullptr);
#endif

// The copier of `device`: host loops on the CPU, stream-ordered copies on a CUDA device.
std::unique_ptr<PadCopier> device_pad_copier(Device device, Stream stream, void* (*allocator)(size_t, void*) = nullptr,
                                             void* context = nullptr);

// Runs `run(padded problem)` on padded copies: allocate, copy in, run, copy out.
template <typename Problem, typename Run>
void run_padded(const Problem& p, PadCopier& copier, Run&& run) {
  PaddedCall<Problem> call = pad_call(p);
  void* base = copier.allocate(call.plan.workspace_bytes);
  bind_workspace(call, base);
  for (const PadRegion& r : call.plan.regions)
    if (r.copy_in) copier.pad(call.plan, r, static_cast<char*>(base) + r.offset);
  run(call.problem);
  for (const PadRegion& r : call.plan.regions)
    if (r.copy_out) copier.unpad(call.plan, r, static_cast<const char*>(base) + r.offset);
}

}  // namespace flashattn::detail
