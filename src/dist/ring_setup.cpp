#include "dist/ring_setup.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "flashattn/api.h"
#include "flashattn/error.h"

namespace flashattn::dist::detail {

namespace {

[[noreturn]] void fail(Status status, const char* fn, const std::string& arg, const std::string& expected,
                       const std::string& got) {
  throw Error(status, std::string(fn) + ": " + arg + ": expected " + expected + ", got " + got);
}

Tensor batched_rows(const Tensor& t) {
  if (!t.present() || t.ndim != 3) return t;
  return Tensor::strided(t.data, t.dtype, {1, t.shape[0], t.shape[1], t.shape[2]},
                         {t.shape[0] * t.stride[0], t.stride[0], t.stride[1], t.stride[2]}, t.device);
}

Tensor batched_lse(const Tensor& t) {
  if (!t.present() || t.ndim != 2) return t;
  return Tensor::strided(t.data, t.dtype, {1, t.shape[0], t.shape[1]},
                         {t.shape[0] * t.stride[0], t.stride[0], t.stride[1]}, t.device);
}

// Rows of the sequence dimension of a q/k/v-like tensor, or -1 when it has the wrong number of dims.
int64_t seq_rows(const Tensor& t, bool varlen) {
  if (!t.present() || t.ndim != (varlen ? 3 : 4)) return -1;
  return t.shape[varlen ? 0 : 1];
}

void check_shard_rows(const char* fn, const Tensor& t, const char* name, bool varlen, int64_t expected,
                      const ShardSpec& spec, int world, int rank) {
  const int64_t rows = seq_rows(t, varlen);
  if (rows < 0)
    fail(Status::invalid_argument, fn, name,
         varlen ? "3 dims (total_local, heads, head_dim)" : "4 dims (batch, seqlen_local, heads, head_dim)",
         t.present() ? t.describe() : "none");
  if (rows != expected)
    fail(Status::invalid_argument, fn, name,
         std::to_string(expected) + " rows: rank " + std::to_string(rank) + "'s share of " +
             (varlen ? "the packed sequences" : "a sequence of " + std::to_string(spec.seqlen)) + " over " +
             std::to_string(world) + " ranks (" + layout_name(spec.layout) + ")",
         std::to_string(rows) + " rows (" + t.describe() + ")");
}

// Everything this rank can check on its own. Validation of shapes, dtypes and options is flashattn's
// own (query_backends validates exactly as forward/backward would), on the local call.
void check_local(Communicator& comm, const FwdParams& p, const ShardSpec& spec, const BwdParams* bwd, const char* fn,
                 RingSetup& s, Stream stream) {
  if (!(p.q.device == comm.device()))
    fail(Status::invalid_argument, fn, "q", "tensors on " + device_name(comm.device()) + " (the communicator's)",
         device_name(p.q.device));
  s.ops = &device_ops(p.q.device);
  if (p.dropout_p != 0.0f)
    fail(Status::unsupported, fn, "dropout_p",
         "0: the dropout mask depends on global positions a per-block call cannot be told",
         std::to_string(p.dropout_p));
  if (p.options.alibi_slopes.present())
    fail(Status::unsupported, fn, "options.alibi_slopes",
         "none: the ALiBi bias depends on global positions a per-block call cannot be told", "a tensor");
  if (p.cu_seqlens_q.present() || p.cu_seqlens_k.present())
    fail(Status::invalid_argument, fn, p.cu_seqlens_q.present() ? "cu_seqlens_q" : "cu_seqlens_k",
         "none: a varlen layout is given by spec.varlen_seqlens", "a tensor");
  if (!spec.varlen() && spec.seqlen < 0)
    fail(Status::invalid_argument, fn, "spec.seqlen", "the global sequence length (>= 0)", std::to_string(spec.seqlen));
  for (int64_t len : spec.varlen_seqlens)
    if (len < 0) fail(Status::invalid_argument, fn, "spec.varlen_seqlens", "lengths >= 0", std::to_string(len));

  const bool varlen = spec.varlen();
  s.shards.clear();
  for (int r = 0; r < s.world; ++r) s.shards.push_back(rank_shard(spec, s.world, r));
  s.rows = s.shards[size_t(s.rank)].rows;
  s.rows_cap = 0;
  for (const RankShard& shard : s.shards) s.rows_cap = std::max(s.rows_cap, shard.rows);
  check_shard_rows(fn, p.q, "q", varlen, s.rows, spec, s.world, s.rank);
  check_shard_rows(fn, p.k, "k", varlen, s.rows, spec, s.world, s.rank);
  check_shard_rows(fn, p.v, "v", varlen, s.rows, spec, s.world, s.rank);

  // The local call as flashattn sees it (varlen: with this rank's local cu_seqlens) validates every
  // tensor's shape, dtype and device and the options; then some backend must support it.
  // The local cu_seqlens live where the tensors do, as flashattn requires of a varlen call.
  if (varlen) {
    const std::vector<int32_t> cu = shard_cu_seqlens(spec, s.world, s.rank);
    const size_t cu_bytes = cu.size() * sizeof(int32_t);
    s.cu_local = s.ops->allocate(cu_bytes, stream);
    s.ops->to_device(cu.data(), s.cu_local.data(), cu_bytes, stream);
    s.cu_count = int64_t(cu.size());
    for (const SeqShard& seq : s.shards[size_t(s.rank)].seqs) s.longest = std::max(s.longest, seq.rows);
  }
  std::vector<BackendSupport> support;
  if (bwd) {
    BwdParams lp = *bwd;
    localise(lp, s);
    support = query_backends(lp);
  } else {
    FwdParams lp = p;
    localise(lp, s);
    support = query_backends(lp);
  }
  const auto chosen = std::find_if(support.begin(), support.end(), [](const BackendSupport& b) { return b.chosen; });
  if (chosen == support.end()) {
    // A forced backend (options.backend) is the only one that counts; the others' empty reasons would
    // read as if they supported the call.
    const std::string& forced = p.options.backend;
    std::string reasons;
    for (const BackendSupport& b : support)
      if (forced.empty() || b.name == forced) reasons += "\n  " + b.name + ": " + b.reason;
    throw Error(Status::unsupported,
                std::string(fn) + ": " +
                    (forced.empty() ? "no backend supports" : "backend '" + forced + "' does not support") +
                    " the per-block calls:" + reasons);
  }
  if (bwd && chosen->name == "cpu_reference")
    fail(Status::unsupported, fn, "options.backend",
         "a backend whose backward reads the softmax_lse and out it is given (the ring passes the global "
         "ones with each block); cpu_reference recomputes them from the block it sees",
         "cpu_reference" + std::string(p.options.backend.empty() ? " (the only backend supporting the call)" : ""));

  s.dtype = p.q.dtype;
  s.nb = varlen ? 1 : p.q.shape[0];
  s.heads = p.q.shape[p.q.ndim - 2];
  s.heads_k = p.k.shape[p.k.ndim - 2];
  s.dim = p.q.shape[p.q.ndim - 1];
  s.window.left = p.options.window_left;
  s.window.right = p.options.causal ? 0 : p.options.window_right;
  s.q = batched_rows(p.q);
  s.k = batched_rows(p.k);
  s.v = batched_rows(p.v);
  s.out = batched_rows(p.out);
  s.lse = batched_lse(p.softmax_lse);
  if (bwd) {
    s.dout = batched_rows(bwd->dout);
    s.dq = batched_rows(bwd->dq);
    s.dk = batched_rows(bwd->dk);
    s.dv = batched_rows(bwd->dv);
  }
}

}  // namespace

void localise(FwdParams& p, const RingSetup& s) {
  if (s.cu_count == 0) return;
  p.cu_seqlens_q = p.cu_seqlens_k = Tensor::contiguous(s.cu_local.data(), DType::i32, {s.cu_count}, p.q.device);
  p.max_seqlen_q = p.max_seqlen_k = s.longest;
}

RingSetup prepare_ring(Communicator& comm, const FwdParams& params, const ShardSpec& spec, const BwdParams* bwd,
                       const char* fn, Stream stream) {
  RingSetup s;
  s.world = comm.size();
  s.rank = comm.rank();
  Status status = Status::ok;
  std::string message;
  try {
    check_local(comm, params, spec, bwd, fn, s, stream);
  } catch (const Error& e) {
    status = e.status();
    message = e.what();
  }
  // The status bytes travel in buffers on the communicator's device. On a GPU reading them back waits
  // for `stream`: one synchronisation per call, the price of never leaving a rank waiting in a transfer.
  if (s.world > 1) {
    DeviceOps& ops = device_ops(comm.device());
    const uint8_t mine = uint8_t(status);
    std::vector<uint8_t> all(size_t(s.world), 0);
    const Buffer send = ops.allocate(1, stream), recv = ops.allocate(all.size(), stream);
    ops.to_device(&mine, send.data(), 1, stream);
    comm.allgather(send.data(), recv.data(), 1, stream);
    ops.to_host(recv.data(), all.data(), all.size(), stream);
    for (int r = 0; r < s.world && status == Status::ok; ++r)
      if (all[size_t(r)] != uint8_t(Status::ok))
        throw Error(Status(all[size_t(r)]), std::string(fn) + ": rank " + std::to_string(r) +
                                                " rejected the call (see its error); no transfer was started");
  }
  if (status != Status::ok) throw Error(status, message);
  return s;
}

Tensor rows_of(const Tensor& t, int64_t row, int64_t rows) {
  Tensor v = t;
  v.data = static_cast<char*>(t.data) + row * t.stride[1] * dtype_size(t.dtype);
  v.shape[1] = rows;
  return v;
}

Tensor lse_rows_of(const Tensor& t, int64_t row, int64_t rows) {
  Tensor v = t;
  v.data = static_cast<char*>(t.data) + row * t.stride[2] * dtype_size(t.dtype);
  v.shape[2] = rows;
  return v;
}

Tensor contiguous4(void* data, DType dtype, int64_t nb, int64_t rows, int64_t heads, int64_t dim, Device device) {
  return Tensor::contiguous(data, dtype, {nb, rows, heads, dim}, device);
}

Tensor contiguous_lse(void* data, int64_t nb, int64_t heads, int64_t rows, Device device) {
  return Tensor::contiguous(data, DType::f32, {nb, heads, rows}, device);
}

size_t kv_block_bytes(const RingSetup& s, DType dtype) {
  return 2 * size_t(s.nb * s.rows_cap * s.heads_k * s.dim) * size_t(dtype_size(dtype));
}

KvBlock kv_block(const RingSetup& s, void* data, DType dtype) {
  KvBlock b;
  b.bytes = kv_block_bytes(s, dtype);
  b.k = contiguous4(data, dtype, s.nb, s.rows_cap, s.heads_k, s.dim, s.q.device);
  b.v = contiguous4(static_cast<char*>(data) + b.bytes / 2, dtype, s.nb, s.rows_cap, s.heads_k, s.dim, s.q.device);
  return b;
}

AttentionOptions block_options(const AttentionOptions& user, const BlockTask& task) {
  AttentionOptions o = user;
  // A window of right 0 and unbounded left is causal; saying so lets a backend take its causal path.
  o.causal = task.window_right == 0 && task.window_left < 0;
  o.window_left = int(task.window_left);
  o.window_right = o.causal ? -1 : int(task.window_right);
  return o;
}

}  // namespace flashattn::dist::detail
