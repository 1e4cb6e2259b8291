#pragma once

// The forward half shared by ring_forward and allgather_forward: runs the per-block attention calls of
// this rank's queries and folds each partial (out, lse) into fp32 accumulators.

#include <vector>

#include "dist/block_tasks.h"
#include "dist/device_ops.h"
#include "dist/ring_setup.h"

namespace flashattn::dist::detail {

class ForwardMerger {
 public:
  explicit ForwardMerger(const RingSetup& setup, Stream stream);

  // Runs `tasks` (from plan_block_tasks) of the local queries against the block whose K/V rows are `k`
  // and `v` (batched views), merging every result. `user` supplies the options (scale, softcap, backend).
  void attend(const FwdParams& user, const std::vector<BlockTask>& tasks, const Tensor& k, const Tensor& v,
              Stream stream);
  // Writes the caller's out and softmax_lse (when given).
  void finish(Stream stream);

 private:
  const RingSetup& s_;
  Buffer acc_out_buf_, acc_lse_buf_, part_out_buf_, part_lse_buf_;
  Tensor acc_out_, acc_lse_;  // fp32 (nb, rows, heads, dim) and (nb, heads, rows)
};

}  // namespace flashattn::dist::detail
