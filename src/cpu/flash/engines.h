#pragma once

// The forward attention engines of cpu_flash and the scheduler that spreads them over the threads.

#include <cstdint>
#include <functional>
#include <vector>

#include "cpu/flash/attn_job.h"
#include "cpu/flash/tile_config.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

// Tiled FlashAttention-2 forward of packed rows [r0, r1) (at most shape.q_rows) of one (sequence, kv
// head): writes their output rows and LSE. `scratch` holds tiled_scratch_floats(c, shape) floats.
int64_t tiled_scratch_floats(const AttnCall& c, TileShape shape);
void attend_tiled(const AttnCall& c, const AttnSeq& s, TileShape shape, int64_t r0, int64_t r1, float* scratch);

// Decode path for few rows (<= kDecodeMaxRows per kv head), 16/32-bit queries (an FP8 cache included): all
// rows of `heads` (<= kDecodeMaxHeads) kv heads of one sequence (seqs[0 .. heads), same b, sq, sk) against
// keys [k0, k1), vectorised over head dim and keys. Leaves per head the unnormalised accumulator (rows x
// head_dim, row stride acc_stride), the row max m (log2 units) and sum l, so that key splits can be merged.
struct DecodePartial {
  float* acc;
  int64_t acc_stride;
  float* m;
  float* l;
};
int64_t decode_scratch_floats(const AttnCall& c, int64_t heads);
void attend_decode(const AttnCall& c, const AttnSeq* seqs, int64_t heads, int64_t k0, int64_t k1,
                   const DecodePartial* out, float* scratch);
// Merges `n` partials of the same rows (in order) and writes the rows' output and LSE.
void finish_decode(const AttnCall& c, const AttnSeq& s, const DecodePartial* parts, int64_t n, float* scratch);

// Runs every (sequence, kv head) of a call, tiled or decode, in parallel over (sequence, kv head, q tile)
// or (sequence, group of kv heads, key split). `before_writes`, when set, runs once after every buffer of
// the call is allocated and before any output is written: forward_kvcache appends its new tokens there,
// so that an allocation failure leaves the cache as it was.
void attend_all(const AttnCall& c, const std::vector<AttnSeq>& seqs,
                const std::function<void()>& before_writes = nullptr);

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
