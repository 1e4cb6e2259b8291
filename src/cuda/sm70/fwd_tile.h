#pragma once

// The sm70 forward's tile for one head-dim bucket: the CTA's query rows, the key rows per K/V tile and
// the shared memory they take. Plain C++: the backend checks the footprint against the device, the kernel
// lays out its tiles with it.
//
// Four warps of 16 query rows each (one 16 x 16 m8n8k4 warp tile high, mma884_layout.h). Shared memory
// holds Q, one K and one V tile and each warp's P (the softmax output, staged in f16 because a lane's
// accumulators and its A operand cover different elements); rows are padded by 8 halves so that the four
// rows one quadpair's lanes read at once start 16 bytes apart in the bank space. Keys per tile: 64 up to
// head dim 128, 32 above, which keeps the largest bucket at 71 KB, inside sm_70's 96 KB.

namespace flashattn::detail::cuda::sm70 {

struct FwdTile {
  int head_dim = 0;  // the bucket: a multiple of 32 up to 256
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = 16 * kWarps;
  static constexpr int kElemBytes = 2;

  constexpr int block_n() const { return head_dim <= 128 ? 64 : 32; }
  constexpr int row_pitch() const { return head_dim + 8; }  // halves between rows of Q, K and V
  constexpr int p_pitch() const { return block_n() + 8; }   // halves between rows of a warp's P
  constexpr int q_elems() const { return kBlockM * row_pitch(); }
  constexpr int kv_elems() const { return block_n() * row_pitch(); }
  constexpr int p_elems() const { return kWarps * 16 * p_pitch(); }
  constexpr int smem_bytes() const { return kElemBytes * (q_elems() + 2 * kv_elems() + p_elems()); }
};

constexpr FwdTile fwd_tile(int bucket) { return FwdTile{bucket}; }

static_assert(fwd_tile(256).smem_bytes() <= 96 * 1024, "sm_70 allows 96 KB of shared memory per CTA");

}  // namespace flashattn::detail::cuda::sm70
