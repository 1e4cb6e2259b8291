#pragma once

// What ring_forward, ring_backward and allgather_forward share: argument checks agreed by all ranks, the
// shard map of every rank, the ring's batched view of the user's tensors, and per-block call params.
//
// Batched convention: the ring addresses every tensor as if it were dense. A dense q (B, S, H, D) stays
// as it is; a varlen q (total, H, D) becomes (1, total, H, D) and its lse (H, total) becomes
// (1, H, total). Each per-block call then is a dense call of batch nb (B, or 1 for varlen, where each
// call covers rows of one sequence).

#include <string>
#include <vector>

#include "dist/block_tasks.h"
#include "dist/device_ops.h"
#include "dist/shard_map.h"
#include "flashattn/dist.h"
#include "flashattn/params.h"

namespace flashattn::dist::detail {

struct RingSetup {
  int world = 1, rank = 0;
  std::vector<RankShard> shards;  // of every rank, indexed by rank
  GlobalWindow window;
  DeviceOps* ops = nullptr;
  DType dtype = DType::f32;
  int64_t nb = 0, heads = 0, heads_k = 0, dim = 0;
  int64_t rows = 0;      // this rank's rows
  int64_t rows_cap = 0;  // the most rows any rank holds: the capacity of a travelling K/V block
  // The caller's tensors in the batched convention (absent stays absent).
  Tensor q, k, v, out, lse, dout, dq, dk, dv;
  // Varlen: this rank's local cu_seqlens (cu_count offsets) on the tensors' device, and its longest
  // sequence; cu_count is 0 for a dense call.
  Buffer cu_local;
  int64_t cu_count = 0, longest = 0;
};

// `p` as flashattn sees this rank's shard alone: varlen calls get the local cu_seqlens and max_seqlen.
// It is the call check_local validates and, with one rank, the whole ring: either layout keeps the
// sequence(s) of a world of one in order, so the ring reduces to this plain call.
void localise(FwdParams& p, const RingSetup& s);

// Checks the call on this rank, then agrees with every rank (one small allgather): if any rank's check
// failed, every rank throws, this rank with its own message or with a pointer to the failing rank.
// `bwd` is the backward call's params when preparing a backward (its tensors are checked too). The
// agreement is ordered on `stream` and waits for it on devices other than the host.
RingSetup prepare_ring(Communicator& comm, const FwdParams& params, const ShardSpec& spec, const BwdParams* bwd,
                       const char* fn, Stream stream);

// Rows [row, row + rows) of a batched q-like view (dim 1) or lse view (dim 2).
Tensor rows_of(const Tensor& t, int64_t row, int64_t rows);
Tensor lse_rows_of(const Tensor& t, int64_t row, int64_t rows);

// A contiguous (nb, rows, heads, dim) view of `data`.
Tensor contiguous4(void* data, DType dtype, int64_t nb, int64_t rows, int64_t heads, int64_t dim, Device device);
// A contiguous (nb, heads, rows) fp32 view of `data`.
Tensor contiguous_lse(void* data, int64_t nb, int64_t heads, int64_t rows, Device device);

// A travelling K/V block: k then v, each (nb, rows_cap, heads_k, dim) in the call's dtype, contiguous.
struct KvBlock {
  Tensor k, v;  // whole-capacity views
  size_t bytes = 0;
};
size_t kv_block_bytes(const RingSetup& s, DType dtype);
KvBlock kv_block(const RingSetup& s, void* data, DType dtype);

// The options of one per-block call: the caller's, with the task's local window in place of the global
// mask.
AttentionOptions block_options(const AttentionOptions& user, const BlockTask& task);

}  // namespace flashattn::dist::detail
