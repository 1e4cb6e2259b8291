#pragma once

// The tile-level pieces of cpu_flash's backward (FlashAttention-2, Dao 2023, Alg. 2), shared by its two
// schedules (backward.cpp):
//  * a packed *query block*: up to q_rows packed rows of one (sequence, kv head) with everything the
//    pairs need from them, converted once: scaled Q^T, dO^T (query rows in lanes, for S^T and dP^T),
//    Q and dO (head dim in lanes, for dK and dV), the LSE in log2 units and D = rowsum(dO * O);
//  * a *pair* (query block, K/V tile): recompute S^T, P^T from the LSE, dP^T, then dS^T, and accumulate
//    dV += P^T dO, dK += dS^T Q and/or dQ += dS K into fp32 tiles.
// bf16 inputs on CPUs with AVX-512 BF16 run the five GEMMs as bf16 dot products (microkernel_bf16.h) on
// bf16 copies of the tiles: Q, K, V and dO exact, P and dS rounded to bf16 as the GPU kernels round them
// (dS with the softmax scale inside), accumulation in fp32. An odd head dim runs the fp32 path.

#include <cstdint>

#include "api/problem.h"
#include "cpu/flash/attn_job.h"
#include "cpu/flash/row_lanes.h"
#include "cpu/flash/tile_config.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

struct QueryBlock {
  int64_t r0 = 0;  // first packed row
  RowLanes lanes;
  float* qt;           // Q^T * q_scale: head_dim x q_rows strip tile
  float* dot;          // dO^T, same shape
  float* q;            // Q: q_rows x head_dim (strips over head dim)
  float* dout;         // dO, same shape
  float* lse2;         // LSE * log2(e); +inf for padding lanes (their P is 0)
  float* dsum;         // rowsum(dO * O)
  float* lane_memory;  // backs `lanes`
  // bf16 dot products only (microkernel_bf16.h layouts), else null: Q^T (unscaled) and dO^T paired along
  // the head dim (B of S^T and dP^T); Q and dO paired along the query rows (B of dK and dV).
  uint32_t* qt_pairs = nullptr;
  uint32_t* dot_pairs = nullptr;
  uint32_t* q_pairs = nullptr;
  uint32_t* dout_pairs = nullptr;
};

// Floats of one packed query block; carves it from `mem` (from a null base to measure).
int64_t query_block_floats(const AttnCall& c, TileShape t);
QueryBlock carve_query_block(const AttnCall& c, TileShape t, float* mem);

// Packs packed rows [r0, r1) of (sequence b = s.b, kv head s.hk) into `blk` (carved before): reads q, out,
// dout and the LSE of the problem; `row` is PairScratch::row.
void pack_query_block(const AttnCall& c, const BwdProblem& p, const SeqRange& range, const AttnSeq& s, int64_t r0,
                      int64_t r1, QueryBlock& blk, float* row);

// Per-thread scratch of the pairs: the K/V tile and its gradients, S^T/P^T and dP^T/dS^T.
struct PairScratch {
  float* kt;  // k_rows x head_dim strip tiles
  float* vt;
  float* dk;  // fp32 accumulators of the K/V tile's gradients
  float* dv;
  float* st;  // k_rows x q_rows
  float* dpt;
  float* row;  // 2 x 16 rows of head_dim (padded): one strip of Q and dO while packing
  int64_t* k_off;
  int64_t* v_off;
  // bf16 dot products only, else null: K and V row-major (A of S^T and dP^T), K paired along the keys
  // (B of dQ), P^T and dS^T paired along the query rows (A of dV and dK), dS paired along the keys (A of
  // dQ, transposed layout).
  uint32_t* k_rows = nullptr;
  uint32_t* v_rows = nullptr;
  uint32_t* k_pairs = nullptr;
  uint32_t* pt_pairs = nullptr;
  uint32_t* dst_pairs = nullptr;
  uint32_t* ds_pairs = nullptr;
};
int64_t pair_scratch_floats(const AttnCall& c, TileShape t);
PairScratch carve_pair_scratch(const AttnCall& c, TileShape t, float* mem);

// Converts keys [j0, j0 + bc) of `s` into w.kt / w.vt.
void load_kv_tile(const AttnCall& c, const AttnSeq& s, TileShape t, int64_t j0, int64_t bc, const PairScratch& w);

// Whether any row of the block sees any key of [j0, j0 + bc).
bool pair_visible(const QueryBlock& blk, int64_t j0, int64_t bc);

// One pair. dkdv: accumulate into w.dk / w.dv; dq (nullptr: skip): accumulate into this rows x head_dim
// strip tile, rows = 16 * blk.lanes.strips (also its strip stride / 16).
void backward_pair(const AttnCall& c, TileShape t, const QueryBlock& blk, int64_t j0, int64_t bc, const PairScratch& w,
                   bool dkdv, float* dq);

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
