#include "dist/forward_merge.h"

#include <limits>

#include "flashattn/api.h"

namespace flashattn::dist::detail {

ForwardMerger::ForwardMerger(const RingSetup& setup, Stream stream) : s_(setup) {
  DeviceOps& ops = *s_.ops;
  const Device dev = s_.q.device;
  const size_t rows_elems = size_t(s_.nb * s_.rows * s_.heads * s_.dim);
  const size_t lse_elems = size_t(s_.nb * s_.heads * s_.rows);
  acc_out_buf_ = ops.allocate(rows_elems * sizeof(float), stream);
  acc_lse_buf_ = ops.allocate(lse_elems * sizeof(float), stream);
  // A call covers at most all local query rows, so one scratch of that size serves every call.
  part_out_buf_ = ops.allocate(rows_elems * size_t(dtype_size(s_.dtype)), stream);
  part_lse_buf_ = ops.allocate(lse_elems * sizeof(float), stream);
  acc_out_ = contiguous4(acc_out_buf_.data(), DType::f32, s_.nb, s_.rows, s_.heads, s_.dim, dev);
  acc_lse_ = contiguous_lse(acc_lse_buf_.data(), s_.nb, s_.heads, s_.rows, dev);
  // -inf: no row has seen a key. acc_out needs no initial value: merge_partial overwrites it on a row's
  // first partial and finish_forward writes 0 for a row that never had one.
  ops.fill(acc_lse_, -std::numeric_limits<float>::infinity(), stream);
}

void ForwardMerger::attend(const FwdParams& user, const std::vector<BlockTask>& tasks, const Tensor& k, const Tensor& v,
                           Stream stream) {
  for (const BlockTask& t : tasks) {
    FwdParams call;
    call.q = rows_of(s_.q, t.q_row, t.q_rows);
    call.k = rows_of(k, t.k_row, t.k_rows);
    call.v = rows_of(v, t.k_row, t.k_rows);
    call.out = contiguous4(part_out_buf_.data(), s_.dtype, s_.nb, t.q_rows, s_.heads, s_.dim, s_.q.device);
    call.softmax_lse = contiguous_lse(part_lse_buf_.data(), s_.nb, s_.heads, t.q_rows, s_.q.device);
    call.options = block_options(user.options, t);
    forward(call, stream);
    s_.ops->merge_partial(rows_of(acc_out_, t.q_row, t.q_rows), lse_rows_of(acc_lse_, t.q_row, t.q_rows), call.out,
                          call.softmax_lse, stream);
  }
}

void ForwardMerger::finish(Stream stream) { s_.ops->finish_forward(acc_out_, acc_lse_, s_.out, s_.lse, stream); }

}  // namespace flashattn::dist::detail
