#include <string>

#include "api/validate.h"
#include "api/validate_common.h"
#include "api/validate_fwd_core.h"
#include "api/validate_paged_varlen.h"

namespace flashattn::detail {

namespace {

// Checks the values of cu_seqlens on the host: starts at 0, non-decreasing, ends at `total` (unless it is
// -1: the offsets of a paged cache address nothing), and no sequence longer than `max_seqlen`.
void check_cu_seqlens_values(const ArgChecker& c, const Tensor& cu, const char* name, int64_t total, int64_t max_seqlen,
                             const char* max_name) {
  const int32_t* v = static_cast<const int32_t*>(cu.data);
  int64_t n = cu.shape[0];
  if (v[0] != 0) c.fail(name, "cu_seqlens[0] == 0", std::to_string(v[0]));
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] < v[i - 1])
      c.fail(name, "non-decreasing offsets",
             "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(v[i]) + " < cu_seqlens[" +
                 std::to_string(i - 1) + "] = " + std::to_string(v[i - 1]));
    if (v[i] - v[i - 1] > max_seqlen)
      c.fail(name, std::string("sequence lengths <= ") + max_name + " = " + std::to_string(max_seqlen),
             "length " + std::to_string(v[i] - v[i - 1]) + " for sequence " + std::to_string(i - 1));
  }
  if (total >= 0 && v[n - 1] != total)
    c.fail(name, "cu_seqlens[batch] equal to the number of rows (" + std::to_string(total) + ")",
           std::to_string(v[n - 1]));
}

}  // namespace

FwdProblem make_fwd_core(const ArgChecker& c, const FwdParams& p) {
  FwdProblem pr;
  const bool varlen = p.cu_seqlens_q.present() || p.cu_seqlens_k.present();
  if (varlen && !(p.cu_seqlens_q.present() && p.cu_seqlens_k.present()))
    c.fail(p.cu_seqlens_q.present() ? "cu_seqlens_k" : "cu_seqlens_q",
           "both cu_seqlens_q and cu_seqlens_k for varlen attention", "only one of them");
  const bool paged = p.block_table.present();
  if (!varlen && (paged || p.seqused_k.present()))
    c.fail(paged ? "block_table" : "seqused_k", "a varlen call (cu_seqlens_q and cu_seqlens_k given)", "a dense call");
  const int rank = varlen ? 3 : 4;
  const int k_rank = paged ? 4 : rank;
  const char* q_dims = varlen ? "(total_q, heads, head_dim)" : "(batch, seqlen_q, heads, head_dim)";
  const char* k_dims = paged    ? kPagedKeyDims
                       : varlen ? "(total_k, heads_k, head_dim)"
                                : "(batch, seqlen_k, heads_k, head_dim)";

  c.tensor(p.q, "q", rank, q_dims);
  const bool fp8 = p.q.dtype == DType::fp8_e4m3;
  if (!fp8) c.float_dtype(p.q, "q");
  c.device_index(p.q, "q");
  c.tensor(p.k, "k", k_rank, k_dims);
  c.tensor(p.v, "v", k_rank, k_dims);
  c.same_dtype(p.k, "k", p.q.dtype, "q");
  c.same_dtype(p.v, "v", p.q.dtype, "q");
  c.device(p.k, "k", p.q.device, "q");
  c.device(p.v, "v", p.q.device, "q");

  pr.dtype = p.q.dtype;
  pr.device = p.q.device;
  pr.head_dim = p.q.shape[rank - 1];
  pr.heads = p.q.shape[rank - 2];
  pr.heads_k = p.k.shape[k_rank - 2];
  check_head_dim(c, "q", pr.head_dim);
  check_heads(c, pr.heads, pr.heads_k, "k");

  if (varlen) {
    pr.total_q = p.q.shape[0];
    if (paged) {
      pr.paged = paged_keys(c, p, pr);
      pr.total_k = pr.paged.num_blocks * pr.paged.page_size;
    } else {
      pr.total_k = p.k.shape[0];
      c.shape(p.k, "k", {pr.total_k, pr.heads_k, pr.head_dim}, k_dims);
      c.shape(p.v, "v", {pr.total_k, pr.heads_k, pr.head_dim}, "(total_k, heads_k, head_dim) (same as k)");
    }
    auto check_cu = [&](const Tensor& cu, const char* name) {
      c.tensor(cu, name, 1, "(batch + 1)");
      c.dtype(cu, name, DType::i32);
      c.device(cu, name, pr.device, "q");
      if (cu.shape[0] < 1) c.fail(name, "at least 1 element (batch + 1)", "0 elements");
    };
    check_cu(p.cu_seqlens_q, "cu_seqlens_q");
    check_cu(p.cu_seqlens_k, "cu_seqlens_k");
    if (p.cu_seqlens_k.shape[0] != p.cu_seqlens_q.shape[0])
      c.fail("cu_seqlens_k", "shape " + dims_string({p.cu_seqlens_q.shape[0]}) + " (same as cu_seqlens_q)",
             "shape " + shape_string(p.cu_seqlens_k));
    pr.batch = p.cu_seqlens_q.shape[0] - 1;
    if (p.max_seqlen_q < 0) c.fail("max_seqlen_q", "a value >= 0", std::to_string(p.max_seqlen_q));
    if (p.max_seqlen_k < 0) c.fail("max_seqlen_k", "a value >= 0", std::to_string(p.max_seqlen_k));
    pr.seqlen_q = p.max_seqlen_q;
    pr.seqlen_k = p.max_seqlen_k;
    if (paged && p.block_table.shape[0] != pr.batch)
      c.fail("block_table", "shape [" + std::to_string(pr.batch) + ", max_blocks_per_seq] (batch of cu_seqlens_q)",
             "shape " + shape_string(p.block_table));
    pr.seqused_k = seqused_keys(c, p.seqused_k, pr);
    if (pr.device.type == DeviceType::cpu) {
      check_cu_seqlens_values(c, p.cu_seqlens_q, "cu_seqlens_q", pr.total_q, pr.seqlen_q, "max_seqlen_q");
      check_cu_seqlens_values(c, p.cu_seqlens_k, "cu_seqlens_k", paged ? -1 : pr.total_k, pr.seqlen_k, "max_seqlen_k");
    }
    pr.cu_seqlens_q = static_cast<const int32_t*>(p.cu_seqlens_q.data);
    pr.cu_seqlens_k = static_cast<const int32_t*>(p.cu_seqlens_k.data);
    if (pr.device.type == DeviceType::cpu) check_key_counts(c, p, pr);
  } else {
    pr.batch = p.q.shape[0];
    pr.seqlen_q = p.q.shape[1];
    pr.seqlen_k = p.k.shape[1];
    c.shape(p.k, "k", {pr.batch, pr.seqlen_k, pr.heads_k, pr.head_dim}, k_dims);
    c.shape(p.v, "v", {pr.batch, pr.seqlen_k, pr.heads_k, pr.head_dim},
            "(batch, seqlen_k, heads_k, head_dim) (same as k)");
    pr.total_q = pr.batch * pr.seqlen_q;
    pr.total_k = pr.batch * pr.seqlen_k;
  }
  pr.q = rows_view(p.q);
  pr.k = rows_view(p.k);
  pr.v = rows_view(p.v);

  pr.score = make_score_params(c, p.options, pr.batch, pr.heads, pr.head_dim, pr.device);
  if (!(p.dropout_p >= 0.0f && p.dropout_p < 1.0f))
    c.fail("dropout_p", "a probability in [0, 1)", std::to_string(p.dropout_p));
  pr.dropout = DropoutParams{p.dropout_p, p.seed, p.offset};
  if (fp8 && p.dropout_p > 0.0f)
    c.fail("dropout_p", "0 with fp8_e4m3 inputs (FP8 attention has no dropout)", std::to_string(p.dropout_p));
  const char* only_with = "fp8_e4m3 inputs";
  pr.q_descale = descale_view(c, p.q_descale, "q_descale", pr.batch, pr.heads_k, pr.device, fp8, only_with);
  pr.k_descale = descale_view(c, p.k_descale, "k_descale", pr.batch, pr.heads_k, pr.device, fp8, only_with);
  pr.v_descale = descale_view(c, p.v_descale, "v_descale", pr.batch, pr.heads_k, pr.device, fp8, only_with);
  return pr;
}

void check_out_like_q(const ArgChecker& c, const Tensor& t, const char* name, const Tensor& q) {
  const char* dims = q.ndim == 3 ? "(total_q, heads, head_dim)" : "(batch, seqlen_q, heads, head_dim)";
  c.tensor(t, name, q.ndim, dims);
  if (q.dtype == DType::fp8_e4m3)
    c.dtype(t, name, DType::bf16);  // FP8 attention writes bf16
  else
    c.same_dtype(t, name, q.dtype, "q");
  c.device(t, name, q.device, "q");
  bool same = true;
  for (int i = 0; i < q.ndim; ++i) same = same && t.shape[i] == q.shape[i];
  if (!same) c.fail(name, "shape " + shape_string(q) + " (same as q)", "shape " + shape_string(t));
}

void check_like(const ArgChecker& c, const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  c.tensor(t, name, ref.ndim, ref.ndim == 3 ? "(total_k, heads_k, head_dim)" : "(batch, seqlen_k, heads_k, head_dim)");
  c.same_dtype(t, name, ref.dtype, ref_name);
  c.device(t, name, ref.device, ref_name);
  bool same = true;
  for (int i = 0; i < ref.ndim; ++i) same = same && t.shape[i] == ref.shape[i];
  if (!same) c.fail(name, "shape " + shape_string(ref) + " (same as " + ref_name + ")", "shape " + shape_string(t));
}

LseView lse_view(const ArgChecker& c, const Tensor& lse, const FwdProblem& pr, bool required) {
  LseView v;
  if (!lse.present()) {
    if (required) c.fail("softmax_lse", "the fp32 log-sum-exp saved by forward", "none");
    return v;
  }
  if (pr.varlen()) {
    c.tensor(lse, "softmax_lse", 2, "(heads, total_q)");
    c.shape(lse, "softmax_lse", {pr.heads, pr.total_q}, "(heads, total_q)");
    v.batch_stride = 0;
    v.head_stride = view_stride(lse, 0);
  } else {
    c.tensor(lse, "softmax_lse", 3, "(batch, heads, seqlen_q)");
    c.shape(lse, "softmax_lse", {pr.batch, pr.heads, pr.seqlen_q}, "(batch, heads, seqlen_q)");
    v.batch_stride = view_stride(lse, 0);
    v.head_stride = view_stride(lse, 1);
  }
  c.dtype(lse, "softmax_lse", DType::f32);
  c.device(lse, "softmax_lse", pr.device, "q");
  v.ptr = static_cast<float*>(lse.data);
  return v;
}

FwdProblem make_fwd_problem(const FwdParams& p) {
  ArgChecker c("flashattn::forward");
  FwdProblem pr = make_fwd_core(c, p);
  check_out_like_q(c, p.out, "out", p.q);
  c.no_self_overlap(p.out, "out");
  c.no_shared_memory(p.out, "out", {{p.q, "q"}, {p.k, "k"}, {p.v, "v"}});
  pr.out = rows_view(p.out);
  pr.lse = lse_view(c, p.softmax_lse, pr, /*required=*/false);
  if (pr.lse.ptr) {  // compared once its own checks bound its offsets
    c.no_self_overlap(p.softmax_lse, "softmax_lse");
    c.no_shared_memory(p.softmax_lse, "softmax_lse", {{p.q, "q"}, {p.k, "k"}, {p.v, "v"}, {p.out, "out"}});
  }
  return pr;
}

}  // namespace flashattn::detail
