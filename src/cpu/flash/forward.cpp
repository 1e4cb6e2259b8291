// forward(): each (sequence, kv head) of the problem becomes an AttnSeq for the shared engines.

#include <vector>

#include "cpu/flash/engines.h"
#include "cpu/flash/entry.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

void forward(const FwdProblem& p, Stream) {
  const AttnCall c = make_call(p.dtype, p.heads, p.heads_k, p.head_dim, p.score, p.dropout);
  std::vector<AttnSeq> seqs;
  seqs.reserve(size_t(p.batch * p.heads_k));
  for (int64_t b = 0; b < p.batch; ++b) {
    const SeqRange r = seq_range(p, b);
    for (int64_t hk = 0; hk < p.heads_k; ++hk) {
      AttnSeq s;
      s.b = b;
      s.hk = hk;
      s.sq = r.sq;
      s.sk = r.sk;
      s.score_factor = p.q_descale.at(b, hk) * p.k_descale.at(b, hk);
      s.out_factor = p.v_descale.at(b, hk);
      s.q = p.q.ptr;
      s.q_start = p.q.offset(b, r.q_start, 0);
      s.q_row_stride = p.q.row_stride;
      s.q_head_stride = p.q.head_stride;
      s.out = p.out.ptr;
      s.out_start = p.out.offset(b, r.q_start, 0);
      s.out_row_stride = p.out.row_stride;
      s.out_head_stride = p.out.head_stride;
      if (p.lse.ptr) {
        s.lse = p.lse.ptr + p.lse.offset(b, r.q_start, 0);
        s.lse_head_stride = p.lse.head_stride;
      }
      s.keys.k = p.k.ptr;
      s.keys.v = p.v.ptr;
      s.keys.k_row_stride = p.k.row_stride;
      s.keys.v_row_stride = p.v.row_stride;
      if (p.paged_kv()) {  // keys from position 0 of the sequence's block table (common/score.h key_offset)
        s.keys.k_start = hk * p.k.head_stride;
        s.keys.v_start = hk * p.v.head_stride;
        s.keys.block_table = p.paged.block_table + b * p.paged.block_table_stride;
        s.keys.page_size = p.paged.page_size;
        s.keys.k_block_stride = p.k.batch_stride;
        s.keys.v_block_stride = p.v.batch_stride;
      } else {
        s.keys.k_start = p.k.offset(b, r.k_start, hk);
        s.keys.v_start = p.v.offset(b, r.k_start, hk);
      }
      seqs.push_back(s);
    }
  }
  attend_all(c, seqs);
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
