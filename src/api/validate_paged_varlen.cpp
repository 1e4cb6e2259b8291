#include "api/validate_paged_varlen.h"

#include <algorithm>
#include <string>

#include "api/validate_common.h"
#include "api/validate_fwd_core.h"

namespace flashattn::detail {

PagedKeys paged_keys(const ArgChecker& c, const FwdParams& p, const FwdProblem& pr) {
  const int64_t num_blocks = p.k.shape[0], page_size = p.k.shape[1];
  c.shape(p.k, "k", {num_blocks, page_size, pr.heads_k, pr.head_dim}, kPagedKeyDims);
  check_like(c, p.v, "v", p.k, "k");
  if (page_size < 1) c.fail("k", "page_size (dim 1) >= 1", std::to_string(page_size));
  c.tensor(p.block_table, "block_table", 2, "(batch, max_blocks_per_seq)");
  c.dtype(p.block_table, "block_table", DType::i32);
  c.device(p.block_table, "block_table", pr.device, "q");
  PagedKeys k;
  k.block_table = static_cast<const int32_t*>(p.block_table.data);
  k.block_table_stride = view_stride(p.block_table, 0);
  k.page_size = page_size;
  k.num_blocks = num_blocks;
  if (__builtin_mul_overflow(p.block_table.shape[1], page_size, &k.capacity))
    c.fail("block_table", "max_blocks_per_seq * page_size (keys a sequence can address) that fits in int64",
           "shape " + shape_string(p.block_table) + " with page_size " + std::to_string(page_size));
  return k;
}

const int32_t* seqused_keys(const ArgChecker& c, const Tensor& t, const FwdProblem& pr) {
  if (!t.present()) return nullptr;
  c.tensor(t, "seqused_k", 1, "(batch)");
  c.dtype(t, "seqused_k", DType::i32);
  c.device(t, "seqused_k", pr.device, "q");
  c.shape(t, "seqused_k", {pr.batch}, "(batch)");
  // Backends index it densely, as flash-attn's kernels do.
  if (pr.batch > 1 && t.stride[0] != 1)
    c.fail("seqused_k", "a contiguous tensor", "stride " + std::to_string(t.stride[0]));
  return static_cast<const int32_t*>(t.data);
}

void check_key_counts(const ArgChecker& c, const FwdParams& p, const FwdProblem& pr) {
  const int32_t* cu = pr.cu_seqlens_k;
  for (int64_t b = 0; b < pr.batch; ++b) {
    // Built by appending: GCC 12 warns (-Wrestrict, a known false positive) on "[" + std::string.
    std::string bs = "[";
    bs.append(std::to_string(b)).append("]");
    const int64_t span = int64_t(cu[b + 1]) - cu[b];
    int64_t keys = span;
    if (pr.seqused_k) {
      keys = pr.seqused_k[b];
      // Contiguous keys: the sequence's own rows of k. Paged: what its block table addresses.
      const int64_t limit = pr.paged_kv() ? std::min(pr.paged.capacity, pr.seqlen_k) : span;
      const std::string what =
          pr.paged_kv()
              ? "min(max_blocks_per_seq * page_size = " + std::to_string(pr.paged.capacity) +
                    ", max_seqlen_k = " + std::to_string(pr.seqlen_k) + ")"
              : "cu_seqlens_k[" + std::to_string(b + 1) + "] - cu_seqlens_k" + bs + " = " + std::to_string(span);
      if (keys < 0 || keys > limit) c.fail("seqused_k" + bs, "a key count in [0, " + what + "]", std::to_string(keys));
    }
    if (!pr.paged_kv()) continue;
    if (keys > pr.paged.capacity)
      c.fail("cu_seqlens_k",
             "sequence lengths <= max_blocks_per_seq * page_size = " + std::to_string(pr.paged.capacity) +
                 " (what block_table addresses)",
             "length " + std::to_string(keys) + " for sequence " + std::to_string(b));
    const int64_t pages = (keys + pr.paged.page_size - 1) / pr.paged.page_size;
    for (int64_t i = 0; i < pages; ++i) {
      const int64_t blk = pr.paged.block_table[b * pr.paged.block_table_stride + i * p.block_table.stride[1]];
      if (blk < 0 || blk >= pr.paged.num_blocks)
        c.fail("block_table" + bs + "[" + std::to_string(i) + "]",
               "a block index in [0, " + std::to_string(pr.paged.num_blocks) + ")", std::to_string(blk));
    }
  }
}

}  // namespace flashattn::detail
