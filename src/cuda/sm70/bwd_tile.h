#pragma once

// The sm70 backward's two tiles (bwd_kernel.cuh). Plain C++: the backend checks the footprints, the
// kernels lay out shared memory with them.
//  * dK/dV kernel: a CTA owns 64 keys (4 warps x 16, one 16-row warp tile each) of one kv head and walks
//    the query rows that see them in steps of q_rows: 32 up to head dim 128 (64 spilled registers: S^T,
//    P^T and dP^T are q_rows / 2 floats each per lane next to dK and dV), 16 above, so that K, V, the step's
//    Q and dO and each warp's staging buffer (P^T, then dS^T: 16 keys x q_rows, f16) fit sm_70's 96 KB.
//    Above head dim 128 the kernel runs twice, dV then dK, each holding one D-wide accumulator.
//  * dQ kernel: a CTA owns 64 query rows (4 warps x 16) of one head and walks the key tiles they see,
//    block_n keys at a time: 64 up to head dim 96, 32 at 128 (64 spilled), 16 above; Q and dO of its rows,
//    one K and one V tile and each warp's dS buffer.
// Rows are padded by 8 halves, as in the forward (fwd_tile.h).

namespace flashattn::detail::cuda::sm70 {

struct BwdTile {
  int head_dim = 0;  // the bucket: a multiple of 32 up to 256
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kWarps;  // keys of a dK/dV CTA, query rows of a dQ CTA
  static constexpr int kElemBytes = 2;

  constexpr int pitch() const { return head_dim + 8; }
  // One pass computes dK and dV together (two D-wide accumulators per lane) up to head dim 128.
  constexpr bool split_passes() const { return head_dim > 128; }

  // dK/dV kernel.
  constexpr int q_rows() const { return head_dim <= 128 ? 32 : 16; }
  constexpr int kv_stage_pitch() const { return q_rows() + 8; }
  constexpr int kv_smem_bytes() const {
    return kElemBytes * (2 * kRows * pitch() + 2 * q_rows() * pitch() + kWarps * 16 * kv_stage_pitch()) +
           2 * q_rows() * 4;  // the step's LSE and D
  }

  // dQ kernel.
  constexpr int block_n() const { return head_dim <= 96 ? 64 : head_dim <= 128 ? 32 : 16; }
  constexpr int dq_stage_pitch() const { return block_n() + 8; }
  constexpr int dq_smem_bytes() const {
    return kElemBytes * (2 * kRows * pitch() + 2 * block_n() * pitch() + kWarps * 16 * dq_stage_pitch());
  }
};

constexpr BwdTile bwd_tile(int bucket) { return BwdTile{bucket}; }

static_assert(bwd_tile(96).kv_smem_bytes() <= 96 * 1024 && bwd_tile(128).kv_smem_bytes() <= 96 * 1024 &&
                  bwd_tile(160).kv_smem_bytes() <= 96 * 1024 && bwd_tile(256).kv_smem_bytes() <= 96 * 1024 &&
                  bwd_tile(96).dq_smem_bytes() <= 96 * 1024 && bwd_tile(128).dq_smem_bytes() <= 96 * 1024 &&
                  bwd_tile(160).dq_smem_bytes() <= 96 * 1024 && bwd_tile(256).dq_smem_bytes() <= 96 * 1024,
              "sm_70 allows 96 KB of shared memory per CTA");

}  // namespace flashattn::detail::cuda::sm70
