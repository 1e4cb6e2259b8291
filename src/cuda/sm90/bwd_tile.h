#pragma once

// The sm90 backward's tile per head-dim bucket and its shared-memory layout (bwd_kernel.cuh). Plain C++
// with FA_HD functions: the kernel uses them and tests/cpp/test_cuda_sm90.cpp checks the layout on the
// host. Tiles use the forward's layout (fwd_tile.h: 64-element column panels, 128-byte swizzle, each
// tile 1024-byte aligned), so the same TMA boxes and descriptor starts apply.
//
// A CTA owns block_n keys of one (kv head, sequence): consumer warpgroup c the keys [64 c, 64 c + 64),
// whose dK and dV it accumulates in registers. It steps over block_m query rows at a time; per step the
// producer brings Q, dO (TMA) and the rows' LSE and D = rowsum(dO * O) into a ring stage.

#include <cstdint>

#include "common/host_device.h"
#include "cuda/sm90/fwd_tile.h"

namespace flashattn::detail::cuda::sm90 {

struct Sm90BwdTile {
  int head_dim = 0;
  int block_n = 0;  // keys of a CTA: kWgmmaRows per consumer warpgroup
  int block_m = 0;  // query rows per step: the N of S^T = K Q^T and the K of dV += P^T dO
  int stages = 0;   // steps in flight (Q, dO, LSE, D)
  int producer_regs = 0, consumer_regs = 0;

  FA_HD constexpr int consumer_warpgroups() const { return block_n / kWgmmaRows; }
  FA_HD constexpr int threads() const { return (1 + consumer_warpgroups()) * kWarpgroupThreads; }
  FA_HD constexpr int panels() const { return head_dim / int(kPanelCols); }
  // dQ = dS K: with head dims of two panels or more each consumer warpgroup computes half of dQ's columns
  // (a 64-wide panel of K) over all block_n keys, reading both warpgroups' dS; with one panel each
  // computes all of dQ's columns over its own 64 keys, and both add into dq_accum (twice the atomics, no
  // barrier between the warpgroups). wgmma's MN-major operands come in whole 64-element panels, so a
  // 64-wide dQ cannot be split by columns.
  FA_HD constexpr bool dq_split_columns() const { return panels() >= 2; }
  FA_HD constexpr int dq_cols() const { return dq_split_columns() ? head_dim / consumer_warpgroups() : head_dim; }
  FA_HD constexpr int dq_keys() const { return dq_split_columns() ? block_n : kWgmmaRows; }

  FA_HD constexpr int kv_bytes() const { return block_n * head_dim * 2; }   // K or V
  FA_HD constexpr int q_bytes() const { return block_m * head_dim * 2; }    // Q or dO of one step
  FA_HD constexpr int ds_bytes() const { return block_n * block_m * 2; }    // dS^T of one step (keys x queries)
  FA_HD constexpr int stat_bytes() const { return block_m * 4; }            // LSE or D of one step (fp32)
  FA_HD constexpr int dq_bytes() const { return block_m * dq_cols() * 4; }  // one warpgroup's dQ of a step (fp32)
  // K, V, then Q and dO per stage, then dS^T twice (a step's dQ product may still read the previous
  // step's while this one's is written), then LSE and D per stage, then each consumer warpgroup's dQ
  // (the copy the dQ writer warp adds into dq_accum: sm90/dq_tiles.h), then the mbarriers.
  FA_HD constexpr int k_offset() const { return 0; }
  FA_HD constexpr int v_offset() const { return kv_bytes(); }
  FA_HD constexpr int q_offset(int stage) const { return 2 * kv_bytes() + stage * q_bytes(); }
  FA_HD constexpr int do_offset(int stage) const { return 2 * kv_bytes() + (stages + stage) * q_bytes(); }
  FA_HD constexpr int ds_offset(int buf) const { return 2 * kv_bytes() + 2 * stages * q_bytes() + buf * ds_bytes(); }
  FA_HD constexpr int lse_offset(int stage) const { return ds_offset(2) + stage * stat_bytes(); }
  FA_HD constexpr int dsum_offset(int stage) const { return ds_offset(2) + (stages + stage) * stat_bytes(); }
  FA_HD constexpr int dq_offset(int consumer) const {
    return ds_offset(2) + 2 * stages * stat_bytes() + consumer * dq_bytes();
  }
  // kv_full, then full and empty per stage, 8 bytes each, then the 8-byte word through which the
  // deterministic mode hands the CTA its ticket.
  FA_HD constexpr int barriers() const { return 1 + 2 * stages; }
  FA_HD constexpr int barrier_offset() const { return dq_offset(consumer_warpgroups()); }
  FA_HD constexpr int ticket_offset() const { return barrier_offset() + barriers() * 8; }
  FA_HD constexpr int smem_bytes() const { return ticket_offset() + 8 + int(kSwizzleAtomBytes); }
  FA_HD constexpr bool registers_fit() const {
    return setmaxnreg_fits(1 + consumer_warpgroups(), producer_regs, consumer_regs);
  }
};

// The compiled buckets' tiles (head_dim 0: none; head dims above 128 stay with cuda_sm80). 128 keys by 64
// query rows: per consumer thread dK and dV take head_dim / 2 fp32 registers each (64 at D = 128), S^T and
// dP^T 32 each, the dQ slice 32, P and dS packed 16 each. Shared memory at D = 128: K + V 64 KB, Q and
// dO 2 x 2 x 16 KB, dS^T 2 x 16 KB, the two dQ copies 2 x 16 KB, 193 KB in all.
// `general`: the softcap/ALiBi instance, whose consumers also hold the score transform's state: 240
// registers for them, 24 for the producer (40 / 232 otherwise: the producer warpgroup also runs the dQ
// writer); the split is the only difference. Each split uses the whole pool of 504 (setmaxnreg_fits).
FA_HD constexpr Sm90BwdTile bwd_tile(int bucket, bool general = false) {
  const int producer = general ? 24 : 40, consumer = general ? 240 : 232;
  if (bucket == 64) return Sm90BwdTile{64, 128, 64, 2, producer, consumer};
  if (bucket == 128) return Sm90BwdTile{128, 128, 64, 2, producer, consumer};
  return Sm90BwdTile{};
}

// The backward's bucket of a head dim (0: none): head dims below a bucket are zero-filled by TMA and
// never stored, as in the forward.
FA_HD constexpr int bwd_bucket(int64_t head_dim) {
  return head_dim > 64 && head_dim <= 128 ? 128 : (head_dim > 32 && head_dim <= 64 ? 64 : 0);
}

}  // namespace flashattn::detail::cuda::sm90
