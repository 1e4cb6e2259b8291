#include "cuda/decode/split_heuristic.h"

#include <algorithm>

#include "cuda/decode/decode_tile.h"

namespace flashattn::detail::cuda::decode {

int choose_num_splits(const SplitInputs& in) {
  if (in.requested > 0) return std::min(in.requested, kMaxSplits);
  if (in.blocks <= 0) return 1;
  const int64_t min_keys = std::max<int64_t>(in.block_n, in.rows);
  const int64_t by_keys = std::max<int64_t>(1, in.max_keys / min_keys);
  const int per_sm = in.streaming ? 1 : std::max(1, in.blocks_per_sm);
  const int64_t by_wave = std::max<int64_t>(1, int64_t(in.sm_count) * per_sm / in.blocks);
  return int(std::min<int64_t>({by_keys, by_wave, kMaxSplits}));
}

}  // namespace flashattn::detail::cuda::decode
