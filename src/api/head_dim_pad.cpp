#include "api/head_dim_pad.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "flashattn/error.h"

namespace flashattn::detail {

namespace {

enum : unsigned { kIn = 1, kOut = 2 };

// Calls f(view, batches, rows, heads, directions) for every head_dim-wide tensor of a problem, in a fixed
// order (pad_call and bind_workspace walk it twice and must meet the same tensors). Which tensors exist
// depends only on the problem's sizes, never on its pointers, which are null in an unbound padded copy.
template <typename F>
void visit(FwdProblem& p, bool out_is_input, F&& f) {
  const int64_t q_batches = p.varlen() ? 1 : p.batch, q_rows = p.varlen() ? p.total_q : p.seqlen_q;
  int64_t k_batches = p.batch, k_rows = p.seqlen_k;
  if (p.paged_kv()) {
    k_batches = p.paged.num_blocks;
    k_rows = p.paged.page_size;
  } else if (p.varlen()) {
    k_batches = 1;
    k_rows = p.total_k;
  }
  f(p.q, q_batches, q_rows, p.heads, kIn);
  f(p.k, k_batches, k_rows, p.heads_k, kIn);
  f(p.v, k_batches, k_rows, p.heads_k, kIn);
  f(p.out, q_batches, q_rows, p.heads, out_is_input ? kIn : kOut);
}

template <typename F>
void visit(FwdProblem& p, F&& f) {
  visit(p, /*out_is_input=*/false, f);
}

template <typename F>
void visit(BwdProblem& p, F&& f) {
  visit(static_cast<FwdProblem&>(p), /*out_is_input=*/true, f);
  const int64_t q_batches = p.varlen() ? 1 : p.batch, q_rows = p.varlen() ? p.total_q : p.seqlen_q;
  const int64_t k_batches = p.varlen() ? 1 : p.batch, k_rows = p.varlen() ? p.total_k : p.seqlen_k;
  f(p.dout, q_batches, q_rows, p.heads, kIn);
  f(p.dq, q_batches, q_rows, p.heads, kOut);
  f(p.dk, k_batches, k_rows, p.heads_k, kOut);
  f(p.dv, k_batches, k_rows, p.heads_k, kOut);
}

template <typename F>
void visit(KVCacheProblem& p, F&& f) {
  f(p.q, p.batch, p.seqlen_q, p.heads, kIn);
  f(p.out, p.batch, p.seqlen_q, p.heads, kOut);
  const bool append = p.seqlen_new > 0;
  if (append) {
    f(p.k_new, p.batch, p.seqlen_new, p.heads_k, kIn);
    f(p.v_new, p.batch, p.seqlen_new, p.heads_k, kIn);
  }
  CacheView& c = p.cache;
  const int64_t batches = c.paged() ? c.num_blocks : c.batches, rows = c.paged() ? c.page_size : c.capacity;
  // The appended tokens must land in the caller's cache: a cache written to comes back whole.
  const unsigned dirs = append ? kIn | kOut : kIn;
  RowsView k{c.k, c.k_batch_stride, c.k_row_stride, c.k_head_stride};
  RowsView v{c.v, c.v_batch_stride, c.v_row_stride, c.v_head_stride};
  f(k, batches, rows, p.heads_k, dirs);
  f(v, batches, rows, p.heads_k, dirs);
  c.k = k.ptr;
  c.v = v.ptr;
  c.k_batch_stride = k.batch_stride, c.k_row_stride = k.row_stride, c.k_head_stride = k.head_stride;
  c.v_batch_stride = v.batch_stride, c.v_row_stride = v.row_stride, c.v_head_stride = v.head_stride;
}

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

template <typename Problem>
PaddedCall<Problem> pad_any(const Problem& p) {
  PaddedCall<Problem> call{p, {}};
  PadPlan& plan = call.plan;
  plan.dtype = p.dtype;
  plan.head_dim = p.head_dim;
  plan.padded = padded_head_dim(p.head_dim);
  const size_t elem = dtype_size(p.dtype);
  visit(call.problem, [&](RowsView& view, int64_t batches, int64_t rows, int64_t heads, unsigned dirs) {
    PadRegion r;
    r.caller = view;
    r.batches = batches;
    r.rows = rows;
    r.heads = heads;
    r.offset = plan.workspace_bytes;
    r.copy_in = dirs & kIn;
    r.copy_out = dirs & kOut;
    plan.workspace_bytes += round_up(size_t(r.elements(plan.padded)) * elem, kPadAlignment);
    plan.regions.push_back(r);
    // Dense (batches, rows, heads, padded). One batch (varlen rows, or a batch of 1) keeps batch stride 0:
    // varlen views index rows absolutely and must not move with the sequence index.
    view.ptr = nullptr;
    view.head_stride = plan.padded;
    view.row_stride = heads * plan.padded;
    view.batch_stride = batches == 1 ? 0 : rows * heads * plan.padded;
  });
  call.problem.head_dim = plan.padded;
  return call;
}

template <typename Problem>
void bind_any(PaddedCall<Problem>& call, void* base) {
  size_t i = 0;
  visit(call.problem, [&](RowsView& view, int64_t, int64_t, int64_t, unsigned) {
    view.ptr = static_cast<char*>(base) + call.plan.regions[i++].offset;
  });
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class HostPadCopier final : public PadCopier {
 public:
  void* allocate(size_t bytes) override {
    buffer_.reset(std::aligned_alloc(kPadAlignment, round_up(bytes ? bytes : 1, kPadAlignment)));
    if (!buffer_) throw std::bad_alloc();
    return buffer_.get();
  }
  void pad(const PadPlan& plan, const PadRegion& r, void* dst) override {
    const size_t elem = dtype_size(plan.dtype);
    each_row(r, [&](int64_t caller_offset, int64_t dense_row) {
      char* d = static_cast<char*>(dst) + size_t(dense_row * plan.padded) * elem;
      std::memcpy(d, static_cast<const char*>(r.caller.ptr) + size_t(caller_offset) * elem,
                  size_t(plan.head_dim) * elem);
      std::memset(d + size_t(plan.head_dim) * elem, 0, size_t(plan.padded - plan.head_dim) * elem);
    });
  }
  void unpad(const PadPlan& plan, const PadRegion& r, const void* src) override {
    const size_t elem = dtype_size(plan.dtype);
    each_row(r, [&](int64_t caller_offset, int64_t dense_row) {
      std::memcpy(static_cast<char*>(r.caller.ptr) + size_t(caller_offset) * elem,
                  static_cast<const char*>(src) + size_t(dense_row * plan.padded) * elem, size_t(plan.head_dim) * elem);
    });
  }

 private:
  // f(element offset of the row in the caller's tensor, index of the row in the dense copy)
  template <typename F>
  static void each_row(const PadRegion& r, F&& f) {
    int64_t dense = 0;
    for (int64_t b = 0; b < r.batches; ++b)
      for (int64_t i = 0; i < r.rows; ++i)
        for (int64_t h = 0; h < r.heads; ++h) f(r.caller.offset(b, i, h), dense++);
  }
  std::unique_ptr<void, FreeDeleter> buffer_;
};

// The copies move every region with one element size, the inputs' dtype's: FP8 calls (bf16 out, or an
// e4m3 cache beside 16-bit q) mix sizes. The dispatcher asks pad_unsupported_reason first (a backend that
// would need the copies declines such a call); this refuses rather than copies wrong bytes.
std::string mixed_sizes_reason(DType inputs, DType other) {
  if (dtype_size(inputs) == dtype_size(other)) return {};
  return std::string("head-dim padding of a call mixing ") + dtype_name(inputs) + " and " + dtype_name(other) +
         " tensors (not implemented)";
}
void require_one_element_size(DType inputs, DType other) {
  if (std::string why = mixed_sizes_reason(inputs, other); !why.empty())
    throw Error(Status::internal, "flashattn: " + why);
}

}  // namespace

std::string pad_unsupported_reason(const FwdProblem& p) { return mixed_sizes_reason(p.dtype, p.out_dtype()); }
std::string pad_unsupported_reason(const BwdProblem&) { return {}; }
std::string pad_unsupported_reason(const KVCacheProblem& p) { return mixed_sizes_reason(p.dtype, p.cache_dtype); }

PaddedCall<FwdProblem> pad_call(const FwdProblem& p) {
  require_one_element_size(p.dtype, p.out_dtype());
  return pad_any(p);
}
PaddedCall<BwdProblem> pad_call(const BwdProblem& p) { return pad_any(p); }
PaddedCall<KVCacheProblem> pad_call(const KVCacheProblem& p) {
  require_one_element_size(p.dtype, p.cache_dtype);
  return pad_any(p);
}
void bind_workspace(PaddedCall<FwdProblem>& call, void* base) { bind_any(call, base); }
void bind_workspace(PaddedCall<BwdProblem>& call, void* base) { bind_any(call, base); }
void bind_workspace(PaddedCall<KVCacheProblem>& call, void* base) { bind_any(call, base); }

std::unique_ptr<PadCopier> make_host_pad_copier() { return std::make_unique<HostPadCopier>(); }

std::unique_ptr<PadCopier> device_pad_copier(Device device, Stream stream, void* (*allocator)(size_t, void*),
                                             void* context) {
  if (device.type == DeviceType::cpu) return make_host_pad_copier();
#if defined(FLASHATTN_WITH_CUDA)
  return make_cuda_pad_copier(device, stream, allocator, context);
#else
  (void)stream, (void)allocator, (void)context;
  throw Error(Status::internal, "flashattn: head-dim padding of a CUDA call in a build without CUDA");
#endif
}

}  // namespace flashattn::detail
