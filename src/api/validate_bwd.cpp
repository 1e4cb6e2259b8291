#include "api/validate.h"
#include "api/validate_common.h"
#include "api/validate_fwd_core.h"

namespace flashattn::detail {

BwdProblem make_bwd_problem(const BwdParams& p) {
  ArgChecker c("flashattn::backward");
  BwdProblem pr;
  // Neither has a backward in flash-attn: a paged cache is an inference layout.
  if (p.block_table.present())
    c.fail("block_table", "none (backward does not support paged K/V, as flash-attn's)", "a tensor");
  if (p.seqused_k.present())
    c.fail("seqused_k", "none (backward takes the key counts from cu_seqlens_k, as flash-attn's)", "a tensor");
  if (p.q.dtype == DType::fp8_e4m3)
    c.fail("q", "dtype f32, f16 or bf16 (FP8 attention has no backward)", dtype_name(p.q.dtype));
  static_cast<FwdProblem&>(pr) = make_fwd_core(c, p);
  check_out_like_q(c, p.out, "out", p.q);
  pr.out = rows_view(p.out);
  pr.lse = lse_view(c, p.softmax_lse, pr, /*required=*/true);
  check_out_like_q(c, p.dout, "dout", p.q);
  check_out_like_q(c, p.dq, "dq", p.q);
  check_like(c, p.dk, "dk", p.k, "k");
  check_like(c, p.dv, "dv", p.v, "v");
  c.no_self_overlap(p.dq, "dq");
  c.no_self_overlap(p.dk, "dk");
  c.no_self_overlap(p.dv, "dv");
  // Each gradient against what the backward reads while it writes it, and against the gradients after it.
  c.no_shared_memory(p.dq, "dq",
                     {{p.dout, "dout"},
                      {p.q, "q"},
                      {p.k, "k"},
                      {p.v, "v"},
                      {p.out, "out"},
                      {p.softmax_lse, "softmax_lse"},
                      {p.dk, "dk"},
                      {p.dv, "dv"}});
  c.no_shared_memory(p.dk, "dk",
                     {{p.dout, "dout"},
                      {p.q, "q"},
                      {p.k, "k"},
                      {p.v, "v"},
                      {p.out, "out"},
                      {p.softmax_lse, "softmax_lse"},
                      {p.dv, "dv"}});
  c.no_shared_memory(
      p.dv, "dv",
      {{p.dout, "dout"}, {p.q, "q"}, {p.k, "k"}, {p.v, "v"}, {p.out, "out"}, {p.softmax_lse, "softmax_lse"}});
  pr.dout = rows_view(p.dout);
  pr.dq = rows_view(p.dq);
  pr.dk = rows_view(p.dk);
  pr.dv = rows_view(p.dv);
  pr.deterministic = p.deterministic;
  return pr;
}

}  // namespace flashattn::detail
