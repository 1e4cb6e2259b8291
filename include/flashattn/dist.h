#pragma once

// Context parallelism: exact attention over a sequence sharded across the ranks of a Communicator.
//
// Every rank holds a shard of q, k and v of the same sequence(s) (self-attention). ring_forward /
// ring_backward pass the K/V shards around the ring of ranks (double-buffered, so each transfer overlaps
// the attention on the block that arrived before it) and merge the partial results with the
// log-sum-exp rule; allgather_forward gathers K/V once and runs one attention call per rank. Each
// per-block attention is an ordinary flashattn::forward/backward call, so any backend that supports the
// call does the arithmetic. See docs/distributed.md for the algorithm, the zigzag layout and memory.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "flashattn/params.h"
#include "flashattn/tensor.h"

namespace flashattn::dist {

// ---------------------------------------------------------------------------------------------------
// Communicator: what the ring needs from a transport (MPI, NCCL, or nothing for a ring of one).

class Communicator {
 public:
  // A transfer started by start_ring_shift; it must not outlive its communicator. Destroying it without
  // wait() first completes the transfer (host transports block), so its buffers can then be released.
  class Pending {
   public:
    virtual ~Pending() = default;
    // Completes the transfer. Host transports block until the receive buffer is filled; stream-ordered
    // transports (NCCL) instead make `stream` wait for it and return at once.
    virtual void wait(Stream stream) = 0;
  };

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the buffers passed to this communicator must live (and where ring attention's tensors live).
  virtual Device device() const = 0;

  // Starts sending `bytes` from `send` to rank (rank + 1) % size and receiving `bytes` from rank
  // (rank - 1 + size) % size into `recv`. Work already queued on `stream` that writes `send` is complete
  // before it is read. `send` and `recv` must not overlap and stay untouched until wait() returns. Every
  // rank must start its shifts (and allgathers) in the same order: transfers are matched in that order.
  virtual std::unique_ptr<Pending> start_ring_shift(const void* send, void* recv, size_t bytes, Stream stream) = 0;
  // recv (size() * bytes) receives every rank's `send` (bytes each), rank r's at offset r * bytes.
  // Ordered on `stream` like a completed shift.
  virtual void allgather(const void* send, void* recv, size_t bytes, Stream stream) = 0;
  virtual void barrier() = 0;
};

// The communicator of a single process: rank 0 of 1, shifts copy `send` to `recv`. It lets the ring code
// run without any transport (tests, and measuring the ring's own overhead against a plain call).
class LocalCommunicator final : public Communicator {
 public:
  // Host memory (copies are memcpy) or, in builds with CUDA, a visible CUDA device (copies are
  // device-to-device cudaMemcpyAsync on the caller's stream).
  explicit LocalCommunicator(Device device = Device::cpu());
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Device device() const override { return device_; }
  std::unique_ptr<Pending> start_ring_shift(const void* send, void* recv, size_t bytes, Stream stream) override;
  void allgather(const void* send, void* recv, size_t bytes, Stream stream) override;
  void barrier() override {}

 private:
  Device device_;
};

// ---------------------------------------------------------------------------------------------------
// Sharding: which positions of the global sequence each rank holds.

enum class ShardLayout : uint8_t {
  // Rank r holds the r-th of `size` near-equal contiguous chunks. Under a causal mask the last rank
  // does size times the work of the first.
  contiguous,
  // The sequence is cut into 2 * size near-equal chunks; rank r holds chunks r and 2 * size - 1 - r, in
  // that order. Under a causal mask every rank does the same work.
  zigzag,
};

const char* layout_name(ShardLayout layout);

// A run of consecutive positions held by one rank: global positions [start, start + length) stored at
// local rows [local_row, local_row + length) of that rank's shard (relative to the sequence's first
// local row when varlen).
struct Segment {
  int64_t start = 0, length = 0, local_row = 0;
};

// The segments of `rank` for one sequence of `seqlen` positions, in local order: one for contiguous, two
// for zigzag. Chunk sizes differ by at most one (the first seqlen % chunks chunks are one longer); a
// segment may be empty when seqlen is smaller than the number of chunks.
std::vector<Segment> shard_segments(int64_t seqlen, int world, int rank, ShardLayout layout);
// Rows of one sequence of `seqlen` positions held by `rank`.
int64_t shard_length(int64_t seqlen, int world, int rank, ShardLayout layout);

// The global sequence(s) of a context-parallel call: identical on every rank.
struct ShardSpec {
  ShardLayout layout = ShardLayout::zigzag;
  // Dense: the global sequence length; local tensors are (B, shard_length(seqlen, ...), H, D) and the
  // local softmax_lse (B, H, shard_length(...)).
  int64_t seqlen = 0;
  // Varlen (non-empty): the global length of each packed sequence. Every sequence is sharded on its own
  // (its positions run from 0); local tensors are (total_local, H, D) with the shards of the sequences
  // packed in order (shard_cu_seqlens gives the local offsets) and softmax_lse (H, total_local).
  // Leave FwdParams::cu_seqlens_* absent: the local layout follows from these lengths.
  std::vector<int64_t> varlen_seqlens;

  bool varlen() const { return !varlen_seqlens.empty(); }
};

// Rows of the sequence dimension held by `rank`: shard_length for dense, total_local for varlen.
int64_t shard_rows(const ShardSpec& spec, int world, int rank);
// Varlen: the local cu_seqlens of `rank` (sequences + 1 offsets into its local rows).
std::vector<int32_t> shard_cu_seqlens(const ShardSpec& spec, int world, int rank);

// Host copies between a full tensor and one rank's shard of it along dimension `seq_dim` (1 for dense
// q/k/v/out (B, S, H, D), 2 for a dense lse (B, H, S); 0 for varlen (total, H, D), 1 for a varlen lse
// (H, total)). Both tensors are CPU tensors of the same dtype; other dimensions must match.
void shard_tensor(const Tensor& full, const Tensor& local, int seq_dim, const ShardSpec& spec, int world, int rank);
// The inverse: writes the rows of `full` that `rank` holds from its shard `local`.
void unshard_tensor(const Tensor& local, const Tensor& full, int seq_dim, const ShardSpec& spec, int world, int rank);
// Collective: every rank receives the whole tensor in `full` from the shards of all ranks.
void gather_tensor(Communicator& comm, const Tensor& local, const Tensor& full, int seq_dim, const ShardSpec& spec);

// ---------------------------------------------------------------------------------------------------
// Attention over the sharded sequence. Collective: every rank of `comm` calls it with its shards.
//
// params holds this rank's shards of q, k, v (and out, softmax_lse, dout, dq, dk, dv) laid out as `spec`
// says; options apply to the global sequence (causal and sliding windows use global positions). Not
// supported: dropout and ALiBi (their values depend on positions that the per-block calls cannot be
// told). Tensors live on the communicator's device: host, or CUDA in builds with CUDA (then the calls are
// asynchronous on `stream`, like flashattn::forward; see docs/distributed.md).
// Arguments are checked on every rank before any transfer starts, and all ranks throw if any rank's
// arguments are wrong, so a bad call does not deadlock the others. A failure after the first transfer
// (a backend error) leaves the communicator in an undefined state.

// K/V blocks travel around the ring; the local out and (optional) softmax_lse are written.
void ring_forward(Communicator& comm, const FwdParams& params, const ShardSpec& spec, Stream stream = nullptr);

// Reads q, k, v, out and softmax_lse from ring_forward and dout; writes dq, dk, dv. K/V travel around the
// ring again with their dK/dV accumulators (fp32), which arrive home after size() steps. The backend's
// backward must read the softmax_lse and out it is given (flash-attn's contract), not recompute them
// from the block it sees: cpu_reference, which recomputes, is refused.
void ring_backward(Communicator& comm, const BwdParams& params, const ShardSpec& spec, Stream stream = nullptr);

// The simple mode: K/V of every rank are all-gathered, then each rank runs one attention call of its
// queries against the whole sequence (two with the zigzag layout), with the causal/window offsets of its
// positions. Memory per rank grows with the whole sequence's K/V.
void allgather_forward(Communicator& comm, const FwdParams& params, const ShardSpec& spec, Stream stream = nullptr);

}  // namespace flashattn::dist
