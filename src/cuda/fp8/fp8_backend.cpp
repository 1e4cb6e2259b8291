// cuda_fp8: the FP8 forward (fp8_e4m3 q, k, v with descale factors, out bf16; docs/semantics.md "FP8 inputs")
// on any CUDA device, until a native FP8 kernel exists: q, k and v are dequantised into bf16 copies in a
// workspace (dequant.cu), and the bf16 call runs where the dispatcher would run it (cuda_sm90, cuda_sm80).
// The factors are folded where that is one rounding: q x (q_descale x k_descale) per (sequence, kv head),
// k exact (every e4m3 value is a bf16 value), v x v_descale; so the result is a bf16 computation of the
// dequantised problem, which is what flash-attn's criterion compares FP8 results with. Cost: a pass over
// q, k and v (1 byte read, 2 written per element) and their bf16 copies in device memory.
//
// Paged K/V with a v_descale is declined: a page's rows are converted once, and two sequences sharing a
// page may scale it differently.

#include <cuda_runtime_api.h>

#include <string>

#include "api/backends.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/workspace.h"
#include "cuda/fp8/dequant.h"

namespace flashattn::detail {

namespace {

using cuda::fp8::DequantRows;

// The rows of q (`query`) or of k / v, as (outer, inner) blocks: sequences of a dense tensor, the packed
// rows of a varlen one, pages of a paged one.
struct RowBlocks {
  int64_t outer = 0, inner = 0;
  const int32_t* cu_seqlens = nullptr;
};

RowBlocks row_blocks(const FwdProblem& p, bool query) {
  if (!query && p.paged_kv()) return {p.paged.num_blocks, p.paged.page_size, nullptr};
  if (p.varlen()) return {1, query ? p.total_q : p.total_k, query ? p.cu_seqlens_q : p.cu_seqlens_k};
  return {p.batch, query ? p.seqlen_q : p.seqlen_k, nullptr};
}

// The bf16 copy's view: contiguous rows; blocks apart by their size (0 for the one block of a varlen call,
// whose rows are addressed globally).
RowsView copy_view(void* ptr, const RowBlocks& r, int64_t heads, int64_t head_dim) {
  RowsView v;
  v.ptr = ptr;
  v.head_stride = head_dim;
  v.row_stride = heads * head_dim;
  v.batch_stride = r.cu_seqlens ? 0 : r.inner * heads * head_dim;
  return v;
}

int64_t copy_elems(const RowBlocks& r, int64_t heads, int64_t head_dim) { return r.outer * r.inner * heads * head_dim; }

// The bf16 call `p` becomes, its q, k, v at the given copies (null while only asking about support).
FwdProblem bf16_call(const FwdProblem& p, void* q, void* k, void* v) {
  FwdProblem b = p;
  b.dtype = DType::bf16;
  b.q = copy_view(q, row_blocks(p, true), p.heads, p.head_dim);
  b.k = copy_view(k, row_blocks(p, false), p.heads_k, p.head_dim);
  b.v = copy_view(v, row_blocks(p, false), p.heads_k, p.head_dim);
  b.q_descale = b.k_descale = b.v_descale = DescaleView{};
  return b;
}

std::string supports_fwd(const FwdProblem& p) {
  if (p.dtype != DType::fp8_e4m3)
    return std::string("dtype ") + dtype_name(p.dtype) + " (this backend runs fp8_e4m3 inputs)";
  if (p.paged_kv() && p.v_descale.ptr)
    return "paged K/V with v_descale (pages are dequantised once; sequences sharing one may scale it differently)";
  const std::string why = forward_unsupported_reason(bf16_call(p, nullptr, nullptr, nullptr));
  return why.empty() ? std::string() : "the bf16 call it becomes: " + why;
}

void run_fwd(const FwdProblem& p, Stream stream) {
  cuda::DeviceGuard guard(p.device);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  const RowBlocks qr = row_blocks(p, true), kr = row_blocks(p, false);
  const size_t q_bytes = cuda::Workspace::part_bytes(size_t(copy_elems(qr, p.heads, p.head_dim)) * 2);
  const size_t kv_bytes = cuda::Workspace::part_bytes(size_t(copy_elems(kr, p.heads_k, p.head_dim)) * 2);
  cuda::Workspace ws(q_bytes + 2 * kv_bytes, st);
  unsigned char* base = ws.as<unsigned char>();
  void* q = base;
  void* k = base + q_bytes;
  void* v = base + q_bytes + kv_bytes;
  const auto convert = [&](const RowsView& src, void* dst, const RowBlocks& r, int64_t heads, int64_t group,
                           const DescaleView& f1, const DescaleView& f2) {
    DequantRows d;
    d.src = src;
    d.dst = dst;
    d.outer = r.outer;
    d.inner = r.inner;
    d.heads = heads;
    d.head_dim = p.head_dim;
    d.group = group;
    d.cu_seqlens = r.cu_seqlens;
    d.batch = p.batch;
    d.f1 = f1;
    d.f2 = f2;
    cuda::fp8::dequantise_rows(d, st);
  };
  convert(p.q, q, qr, p.heads, p.group_size(), p.q_descale, p.k_descale);  // q x q_descale x k_descale
  convert(p.k, k, kr, p.heads_k, 1, DescaleView{}, DescaleView{});         // exact
  convert(p.v, v, kr, p.heads_k, 1, p.v_descale, DescaleView{});
  dispatch_forward(bf16_call(p, q, k, v), stream);
}

}  // namespace

// The bf16 call is dispatched as any call: head dims are padded, paged K/V read, there.
const Backend& cuda_fp8_backend() {
  static const Backend b{.name = "cuda_fp8",
                         .device = DeviceType::cuda,
                         .supports_fwd = supports_fwd,
                         .run_fwd = run_fwd,
                         .any_head_dim = true,
                         .paged_varlen_fwd = true};
  return b;
}

}  // namespace flashattn::detail
