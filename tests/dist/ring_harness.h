#pragma once

// Runs a context-parallel attention call on any Communicator from one full test case: every rank draws
// the same full inputs (same seed), takes its shard, runs the distributed call and gathers the full
// outputs back, so they can be compared with the single-process oracle on the same data.

#include <string>

#include "attention_case.h"
#include "flashattn/dist.h"

namespace fa_test {

enum class DistMode { ring, allgather };

struct DistCase {
  AttnConfig cfg;  // self-attention: seqlen_q == seqlen_k (or varlen_q == varlen_k)
  flashattn::dist::ShardLayout layout = flashattn::dist::ShardLayout::zigzag;
  DistMode mode = DistMode::ring;
  bool backward = false;  // ring mode only
  std::string name() const;
};

// The full outputs, gathered on every rank (dq/dk/dv only when the case runs backward).
struct DistOutputs {
  FwdOutputs fwd;
  BwdOutputs bwd;
};

// Where a distributed run's tensors live and how its outputs come back: the shards are placed on
// comm.device() and the calls ordered on `stream`; the outputs are copied to the host and assembled
// with `host_comm` (the same ranks as comm, host buffers), or comm itself when that is null.
struct DistRun {
  flashattn::dist::Communicator& comm;
  flashattn::dist::Communicator* host_comm = nullptr;
  flashattn::Stream stream = nullptr;
};

flashattn::dist::ShardSpec shard_spec(const DistCase& c);
// The shard of `full` (dims as the case's q/k/v) held by `rank`.
HostTensor shard_of(const HostTensor& full, int seq_dim, const flashattn::dist::ShardSpec& spec, int world, int rank);
DistOutputs run_distributed(const DistRun& run, const DistCase& c, const AttnInputs& in, const std::string& backend);
inline DistOutputs run_distributed(flashattn::dist::Communicator& comm, const DistCase& c, const AttnInputs& in,
                                   const std::string& backend) {
  return run_distributed(DistRun{comm}, c, in, backend);
}

// Sequence dimension of q/k/v-like tensors and of the lse, dense or varlen.
inline int rows_dim(const AttnConfig& c) { return c.varlen() ? 0 : 1; }
inline int lse_dim(const AttnConfig& c) { return c.varlen() ? 1 : 2; }

}  // namespace fa_test
