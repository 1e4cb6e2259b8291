#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include "api/validate.h"
#include "api/validate_common.h"
#include "api/validate_fwd_core.h"
#include "common/kvcache.h"

namespace flashattn::detail {

namespace {

const int32_t* index_tensor(const ArgChecker& c, const Tensor& t, const char* name, int64_t batch, Device device) {
  if (!t.present()) return nullptr;
  c.tensor(t, name, 1, "(batch)");
  c.dtype(t, name, DType::i32);
  c.device(t, name, device, "q");
  c.shape(t, name, {batch}, "(batch)");
  return static_cast<const int32_t*>(t.data);
}

// Queries are rotated at cache positions too (common/kvcache.h), which pass the end of the cache when a
// sequence has more queries than new tokens (a full cache, for instance): the rows they read must exist.
// `len` is cache_seqlens of sequence b, already checked to lie in [0, capacity - seqlen_new].
void check_rotary_reach(const ArgChecker& c, const KVCacheProblem& pr, int64_t len, int64_t b) {
  if (!pr.rotary.cos || pr.seqlen_q == 0) return;
  const bool consecutive = rotary_q_consecutive(pr.score);
  const int64_t last = len + (consecutive ? pr.seqlen_q - 1 : 0);
  if (last >= pr.rotary.seqlen)
    c.fail("rotary_cos",
           "at least " + std::to_string(last + 1) + " rows (the last query of sequence " + std::to_string(b) +
               " is rotated at cache_seqlens[" + std::to_string(b) + "]" + (consecutive ? " + seqlen_q - 1" : "") +
               " = " + std::to_string(last) + ")",
           std::to_string(pr.rotary.seqlen) + " rows");
}

// A cache length `len` of sequence b (`bs`: "[b]", or "" for a scalar) in [0, capacity - seqlen_new].
// Past it, a paged cache's block_table is what is too short (flash-attn names it too): its columns times
// page_size must cover cache_seqlens + the new tokens.
void check_cache_length(const ArgChecker& c, const KVCacheProblem& pr, int64_t len, const std::string& bs) {
  const int64_t room = pr.cache.capacity - pr.seqlen_new;
  if (len >= 0 && pr.cache.paged() && len > room)  // (len + seqlen_new could overflow)
    c.fail("block_table" + bs,
           "enough pages for cache_seqlens" + bs + " + seqlen_new = " + std::to_string(len) + " + " +
               std::to_string(pr.seqlen_new) + " positions",
           std::to_string(pr.cache.capacity / pr.cache.page_size) + " pages of " + std::to_string(pr.cache.page_size) +
               " (" + std::to_string(pr.cache.capacity) + " positions)");
  if (len < 0 || len > room)
    c.fail("cache_seqlens" + bs,
           "a length in [0, " + std::to_string(room) + "] (cache capacity " + std::to_string(pr.cache.capacity) +
               " minus " + std::to_string(pr.seqlen_new) + " new tokens)",
           std::to_string(len));
}

// Host-side checks of the index values, possible only when they live on the CPU.
void check_index_values(const ArgChecker& c, const KVCacheParams& p, const KVCacheProblem& pr) {
  auto at = [](const int32_t* v, int64_t stride, int64_t i) { return v[i * stride]; };
  for (int64_t b = 0; b < pr.batch; ++b) {
    // Built by appending: GCC 12 warns (-Wrestrict, a known false positive) on "[" + std::string.
    std::string bs = "[";
    bs.append(std::to_string(b)).append("]");
    int64_t len = pr.cache_seqlens ? at(pr.cache_seqlens, p.cache_seqlens.stride[0], b) : pr.cache_seqlens_scalar;
    check_cache_length(c, pr, len, bs);
    check_rotary_reach(c, pr, len, b);
    if (pr.cache_batch_idx) {
      int64_t idx = at(pr.cache_batch_idx, p.cache_batch_idx.stride[0], b);
      if (idx < 0 || idx >= pr.cache.batches)
        c.fail("cache_batch_idx" + bs, "an index in [0, " + std::to_string(pr.cache.batches) + ")",
               std::to_string(idx));
    }
    if (pr.cache_leftpad) {
      int64_t pad = at(pr.cache_leftpad, p.cache_leftpad.stride[0], b);
      if (pad < 0 || pad > len)
        c.fail("cache_leftpad" + bs, "a value in [0, cache_seqlens" + bs + " = " + std::to_string(len) + "]",
               std::to_string(pad));
    }
    if (pr.cache.paged()) {
      // The pages the call reads or writes: from the one holding the first position after the left
      // padding (pages wholly inside the padding are never read, and may hold any entry).
      const int64_t first = pr.cache_leftpad ? at(pr.cache_leftpad, p.cache_leftpad.stride[0], b) : 0;
      const int64_t end = len + pr.seqlen_new;  // <= capacity, checked above
      const int64_t pages = end / pr.cache.page_size + (end % pr.cache.page_size != 0);
      for (int64_t i = first / pr.cache.page_size; i < pages; ++i) {
        int64_t blk = pr.cache.block_table[b * pr.cache.block_table_stride + i * p.block_table.stride[1]];
        if (blk < 0 || blk >= pr.cache.num_blocks)
          c.fail("block_table" + bs + "[" + std::to_string(i) + "]",
                 "a block index in [0, " + std::to_string(pr.cache.num_blocks) + ")", std::to_string(blk));
      }
    }
  }
}

// New tokens are written in place by all sequences at once, so a cache slot they go to must not be used
// by any other position of the call: otherwise the result depends on the order of concurrent writes and
// reads. Contiguous caches: the sequences' cache rows must be distinct. Paged caches: a page written to
// must appear once among the pages the call attends to (checked per page, like block_table itself).
void check_append_targets(const ArgChecker& c, const KVCacheParams& p, const KVCacheProblem& pr) {
  if (pr.seqlen_new == 0) return;
  auto at = [](const int32_t* v, int64_t stride, int64_t i) { return int64_t(v[i * stride]); };
  if (!pr.cache.paged()) {
    if (!pr.cache_batch_idx) return;            // sequence b uses row b
    std::unordered_map<int64_t, int64_t> user;  // cache row -> sequence
    for (int64_t b = 0; b < pr.batch; ++b) {
      const int64_t row = at(pr.cache_batch_idx, p.cache_batch_idx.stride[0], b);
      const auto [it, fresh] = user.emplace(row, b);
      if (!fresh)
        c.fail("cache_batch_idx[" + std::to_string(b) + "]", "distinct cache rows when k_new/v_new are appended",
               "row " + std::to_string(row) + ", also used by sequence " + std::to_string(it->second));
    }
    return;
  }
  const int64_t page = pr.cache.page_size;
  auto block = [&](int64_t b, int64_t i) {
    return at(pr.cache.block_table, 1, b * pr.cache.block_table_stride + i * p.block_table.stride[1]);
  };
  auto name = [](int64_t b, int64_t i) { return "block_table[" + std::to_string(b) + "][" + std::to_string(i) + "]"; };
  auto seqlen = [&](int64_t b) {
    return pr.cache_seqlens ? at(pr.cache_seqlens, p.cache_seqlens.stride[0], b) : pr.cache_seqlens_scalar;
  };
  std::unordered_map<int64_t, std::pair<int64_t, int64_t>> written;  // block -> (sequence, page index)
  for (int64_t b = 0; b < pr.batch; ++b) {
    const int64_t len = seqlen(b);
    for (int64_t i = len / page; i <= (len + pr.seqlen_new - 1) / page; ++i)
      written.emplace(block(b, i), std::pair{b, i});
  }
  for (int64_t b = 0; b < pr.batch; ++b) {
    const int64_t first = pr.cache_leftpad ? at(pr.cache_leftpad, p.cache_leftpad.stride[0], b) : 0;
    for (int64_t i = first / page; i <= (seqlen(b) + pr.seqlen_new - 1) / page; ++i) {
      const auto it = written.find(block(b, i));
      if (it != written.end() && it->second != std::pair{b, i})
        c.fail(name(b, i),
               "a block no other page of the call uses, since k_new/v_new are written to block " +
                   std::to_string(it->first) + " through " + name(it->second.first, it->second.second),
               "block " + std::to_string(it->first));
    }
  }
}

}  // namespace

KVCacheProblem make_kvcache_problem(const KVCacheParams& p) {
  ArgChecker c("flashattn::forward_kvcache");
  KVCacheProblem pr;
  c.tensor(p.q, "q", 4, "(batch, seqlen_q, heads, head_dim)");
  c.float_dtype(p.q, "q");
  c.device_index(p.q, "q");
  pr.dtype = p.q.dtype;
  pr.device = p.q.device;
  pr.batch = p.q.shape[0];
  pr.seqlen_q = p.q.shape[1];
  pr.heads = p.q.shape[2];
  pr.head_dim = p.q.shape[3];
  check_head_dim(c, "q", pr.head_dim);

  const bool paged = p.block_table.present();
  const char* cache_dims =
      paged ? "(num_blocks, page_size, heads_k, head_dim)" : "(batch_cache, seqlen_cache, heads_k, head_dim)";
  c.tensor(p.k_cache, "k_cache", 4, cache_dims);
  c.tensor(p.v_cache, "v_cache", 4, cache_dims);
  // The cache holds q's dtype, or float8 e4m3 (an FP8 KV cache) for both k and v.
  pr.cache_dtype = p.k_cache.dtype == DType::fp8_e4m3 ? DType::fp8_e4m3 : pr.dtype;
  c.same_dtype(p.k_cache, "k_cache", pr.cache_dtype, pr.cache_dtype == pr.dtype ? "q" : "k_cache");
  c.same_dtype(p.v_cache, "v_cache", pr.cache_dtype, pr.cache_dtype == pr.dtype ? "q" : "k_cache");
  c.device(p.k_cache, "k_cache", pr.device, "q");
  c.device(p.v_cache, "v_cache", pr.device, "q");
  pr.heads_k = p.k_cache.shape[2];
  check_heads(c, pr.heads, pr.heads_k, "k_cache");
  const int64_t rows0 = p.k_cache.shape[0], rows1 = p.k_cache.shape[1];
  c.shape(p.k_cache, "k_cache", {rows0, rows1, pr.heads_k, pr.head_dim}, cache_dims);
  c.shape(p.v_cache, "v_cache", {rows0, rows1, pr.heads_k, pr.head_dim}, cache_dims);

  CacheView& cv = pr.cache;
  cv.k = p.k_cache.data;
  cv.v = p.v_cache.data;
  cv.k_batch_stride = view_stride(p.k_cache, 0);
  cv.k_row_stride = view_stride(p.k_cache, 1);
  cv.k_head_stride = view_stride(p.k_cache, 2);
  cv.v_batch_stride = view_stride(p.v_cache, 0);
  cv.v_row_stride = view_stride(p.v_cache, 1);
  cv.v_head_stride = view_stride(p.v_cache, 2);
  if (paged) {
    c.tensor(p.block_table, "block_table", 2, "(batch, max_blocks_per_seq)");
    c.dtype(p.block_table, "block_table", DType::i32);
    c.device(p.block_table, "block_table", pr.device, "q");
    if (p.block_table.shape[0] != pr.batch)
      c.fail("block_table", "shape [" + std::to_string(pr.batch) + ", max_blocks_per_seq] (batch of q)",
             "shape " + shape_string(p.block_table));
    if (rows1 < 1) c.fail("k_cache", "page_size (dim 1) >= 1", std::to_string(rows1));
    if (p.cache_batch_idx.present())
      c.fail("cache_batch_idx", "none with a paged cache (block_table selects the pages)", "a tensor");
    cv.block_table = static_cast<const int32_t*>(p.block_table.data);
    cv.block_table_stride = view_stride(p.block_table, 0);
    cv.page_size = rows1;
    cv.num_blocks = rows0;
    if (__builtin_mul_overflow(p.block_table.shape[1], rows1, &cv.capacity))
      c.fail("block_table", "max_blocks_per_seq * page_size (cache capacity) that fits in int64",
             "shape " + shape_string(p.block_table) + " with page_size " + std::to_string(rows1));
  } else {
    cv.batches = rows0;
    cv.capacity = rows1;
  }

  if (p.k_new.present() != p.v_new.present())
    c.fail(p.k_new.present() ? "v_new" : "k_new", "both k_new and v_new, or neither", "only one of them");
  if (p.k_new.present()) {
    c.tensor(p.k_new, "k_new", 4, "(batch, seqlen_new, heads_k, head_dim)");
    c.same_dtype(p.k_new, "k_new", pr.dtype, "q");
    c.device(p.k_new, "k_new", pr.device, "q");
    pr.seqlen_new = p.k_new.shape[1];
    if (pr.seqlen_new > cv.capacity)
      c.fail("k_new", "at most " + std::to_string(cv.capacity) + " new tokens (dim 1; the cache capacity)",
             std::to_string(pr.seqlen_new) + " tokens");
    c.shape(p.k_new, "k_new", {pr.batch, pr.seqlen_new, pr.heads_k, pr.head_dim},
            "(batch, seqlen_new, heads_k, head_dim)");
    check_like(c, p.v_new, "v_new", p.k_new, "k_new");
    c.no_self_overlap(p.k_cache, "k_cache");
    c.no_self_overlap(p.v_cache, "v_cache");
    // The append writes the caches while q and the new rows are read.
    c.no_shared_memory(p.k_cache, "k_cache",
                       {{p.v_cache, "v_cache"}, {p.q, "q"}, {p.k_new, "k_new"}, {p.v_new, "v_new"}});
    c.no_shared_memory(p.v_cache, "v_cache", {{p.q, "q"}, {p.k_new, "k_new"}, {p.v_new, "v_new"}});
    pr.k_new = rows_view(p.k_new);
    pr.v_new = rows_view(p.v_new);
  }

  pr.cache_seqlens = index_tensor(c, p.cache_seqlens, "cache_seqlens", pr.batch, pr.device);
  if (!pr.cache_seqlens) {
    if (p.cache_seqlens_scalar < -1)
      c.fail("cache_seqlens", "a length >= 0, or -1 for the whole cache", std::to_string(p.cache_seqlens_scalar));
    pr.cache_seqlens_scalar = p.cache_seqlens_scalar == -1 ? cv.capacity - pr.seqlen_new : p.cache_seqlens_scalar;
  }
  pr.cache_batch_idx = index_tensor(c, p.cache_batch_idx, "cache_batch_idx", pr.batch, pr.device);
  pr.cache_leftpad = index_tensor(c, p.cache_leftpad, "cache_leftpad", pr.batch, pr.device);
  if (!paged && !pr.cache_batch_idx && cv.batches < pr.batch)
    c.fail("k_cache", "at least " + std::to_string(pr.batch) + " cache rows (batch of q) in dim 0",
           "shape " + shape_string(p.k_cache));

  if (p.rotary_cos.present() != p.rotary_sin.present())
    c.fail(p.rotary_cos.present() ? "rotary_sin" : "rotary_cos", "both rotary_cos and rotary_sin, or neither",
           "only one of them");
  if (p.rotary_cos.present()) {
    c.tensor(p.rotary_cos, "rotary_cos", 2, "(seqlen_rotary, rotary_dim / 2)");
    c.same_dtype(p.rotary_cos, "rotary_cos", pr.dtype, "q");
    c.device(p.rotary_cos, "rotary_cos", pr.device, "q");
    check_like(c, p.rotary_sin, "rotary_sin", p.rotary_cos, "rotary_cos");
    RotaryParams& r = pr.rotary;
    // Checked before doubling it, which could overflow.
    if (p.rotary_cos.shape[1] <= 0 || p.rotary_cos.shape[1] > pr.head_dim / 2)
      c.fail("rotary_cos", "rotary_dim / 2 in [1, head_dim / 2 = " + std::to_string(pr.head_dim / 2) + "] (dim 1)",
             std::to_string(p.rotary_cos.shape[1]));
    r.dim = 2 * p.rotary_cos.shape[1];
    r.seqlen = p.rotary_cos.shape[0];
    if (r.seqlen < cv.capacity)
      c.fail("rotary_cos", "at least " + std::to_string(cv.capacity) + " rows (one per cache position)",
             std::to_string(r.seqlen) + " rows");
    r.cos = p.rotary_cos.data;
    r.sin = p.rotary_sin.data;
    r.cos_row_stride = view_stride(p.rotary_cos, 0);
    r.sin_row_stride = view_stride(p.rotary_sin, 0);
    r.interleaved = p.rotary_interleaved;
  }

  const bool fp8 = pr.cache_dtype == DType::fp8_e4m3;
  const char* only_with = "an fp8_e4m3 cache";
  pr.k_descale = descale_view(c, p.k_descale, "k_descale", pr.batch, pr.heads_k, pr.device, fp8, only_with);
  pr.v_descale = descale_view(c, p.v_descale, "v_descale", pr.batch, pr.heads_k, pr.device, fp8, only_with);

  pr.score = make_score_params(c, p.options, pr.batch, pr.heads, pr.head_dim, pr.device);
  if (p.num_splits < 0) c.fail("num_splits", "a value >= 0 (0 chooses)", std::to_string(p.num_splits));
  pr.num_splits = p.num_splits;
  if (p.workspace_allocator) {
    pr.workspace_allocator = [](size_t bytes, void* context) {
      return (*static_cast<const std::function<void*(size_t)>*>(context))(bytes);
    };
    pr.workspace_context = const_cast<std::function<void*(size_t)>*>(&p.workspace_allocator);
  }

  check_out_like_q(c, p.out, "out", p.q);
  c.no_self_overlap(p.out, "out");
  c.no_shared_memory(
      p.out, "out",
      {{p.q, "q"}, {p.k_cache, "k_cache"}, {p.v_cache, "v_cache"}, {p.k_new, "k_new"}, {p.v_new, "v_new"}});
  pr.q = rows_view(p.q);
  pr.out = rows_view(p.out);
  if (p.softmax_lse.present()) {
    c.tensor(p.softmax_lse, "softmax_lse", 3, "(batch, heads, seqlen_q)");
    c.shape(p.softmax_lse, "softmax_lse", {pr.batch, pr.heads, pr.seqlen_q}, "(batch, heads, seqlen_q)");
    c.dtype(p.softmax_lse, "softmax_lse", DType::f32);
    c.device(p.softmax_lse, "softmax_lse", pr.device, "q");
    c.no_self_overlap(p.softmax_lse, "softmax_lse");
    c.no_shared_memory(p.softmax_lse, "softmax_lse",
                       {{p.q, "q"},
                        {p.k_cache, "k_cache"},
                        {p.v_cache, "v_cache"},
                        {p.k_new, "k_new"},
                        {p.v_new, "v_new"},
                        {p.out, "out"}});
    pr.lse =
        LseView{static_cast<float*>(p.softmax_lse.data), view_stride(p.softmax_lse, 0), view_stride(p.softmax_lse, 1)};
  }
  if (pr.device.type == DeviceType::cpu) {
    check_index_values(c, p, pr);
    check_append_targets(c, p, pr);
  } else if (!pr.cache_seqlens && pr.batch > 0) {
    // A scalar length is on the host whatever the device: its bounds can be checked without a sync.
    check_cache_length(c, pr, pr.cache_seqlens_scalar, "");
    check_rotary_reach(c, pr, pr.cache_seqlens_scalar, 0);
  }
  return pr;
}

}  // namespace flashattn::detail
