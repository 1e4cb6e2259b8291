// Spreads the (sequence, kv head) jobs of a forward or forward_kvcache call over the OpenMP threads.
//
// A job with many packed rows is cut into q tiles (one work item each); jobs with few rows (decode) are
// grouped by sequence into one item, or into key splits whose partials the last split merges when the
// call has too few items to keep every thread busy. Items run longest first under dynamic scheduling, so
// the long causal tiles do not end up last on one thread.

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <vector>

#include "cpu/flash/engines.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

struct Item {
  bool tiled = false;
  int64_t seq = 0;         // tiled: the job; decode: the first job of its head group
  int64_t r0 = 0, r1 = 0;  // tiled: packed rows
  int64_t heads = 0;       // decode: jobs (kv heads) in the group
  int64_t k0 = 0, k1 = 0;  // decode: keys
  int64_t part = -1;       // decode split: slot of its first head's partial; -1 when the group is not split
  int64_t split_group = -1;
  int64_t cost = 0;  // estimated multiply-adds / head_dim
};

// The widest query tile that fits the cache budget and still gives every thread enough tiles.
TileShape choose_tiles(const AttnCall& c, const std::vector<AttnSeq>& seqs, int64_t threads) {
  int64_t chosen = kForwardQueryRows[std::size(kForwardQueryRows) - 1];
  for (int64_t q : kForwardQueryRows) {
    int64_t tiles = 0;
    for (const AttnSeq& s : seqs)
      if (s.rows(c) > kDecodeMaxRows) tiles += (s.rows(c) + q - 1) / q;
    if (forward_tile_fits(c.head_dim, q) && tiles >= kTilesPerThread * threads) {
      chosen = q;
      break;
    }
  }
  return TileShape{chosen, kForwardKeyRows};
}

// Keys visible to queries [i0, i1] of a job: [key_begin(i0), key_end(i1)) since both bounds grow with i.
void visible_keys(const AttnCall& c, const AttnSeq& s, int64_t i0, int64_t i1, int64_t* lo, int64_t* hi) {
  const Mask mask = s.mask(c);
  *lo = mask.key_begin(i0);
  *hi = std::max(*lo, mask.key_end(i1));
}

// A split decode group: its partials occupy slots first_part + split * heads + head.
struct SplitGroup {
  int64_t seq, heads, first_part, splits;
};

}  // namespace

void attend_all(const AttnCall& c, const std::vector<AttnSeq>& seqs, const std::function<void()>& before_writes) {
  const int64_t threads = omp_get_max_threads();
  const TileShape shape = choose_tiles(c, seqs, threads);
  const int64_t Dp = strips_of(c.head_dim) * kLanes;
  const int64_t partial_floats = round_up(kDecodeMaxRows * Dp, kLanes) + 2 * kLanes;
  const int64_t heads_per_pass = kDecodeMaxHeads;

  // Tiled items; decode jobs gathered into groups of consecutive kv heads of one sequence.
  std::vector<Item> items;
  std::vector<Item> groups;
  for (int64_t k = 0; k < int64_t(seqs.size()); ++k) {
    const AttnSeq& s = seqs[size_t(k)];
    const int64_t R = s.rows(c);
    if (R == 0) continue;
    if (R <= kDecodeMaxRows && c.dtype != DType::fp8_e4m3) {
      const bool extend = !groups.empty() && groups.back().heads < heads_per_pass &&
                          seqs[size_t(groups.back().seq)].b == s.b && groups.back().seq + groups.back().heads == k;
      if (extend) {
        ++groups.back().heads;
      } else {
        Item g;
        g.seq = k;
        g.heads = 1;
        groups.push_back(g);
      }
      continue;
    }
    for (int64_t r0 = 0; r0 < R; r0 += shape.q_rows) {
      Item it;
      it.seq = k;
      it.tiled = true;
      it.r0 = r0;
      it.r1 = std::min(R, r0 + shape.q_rows);
      int64_t lo, hi;
      visible_keys(c, s, it.r0 / c.group, (it.r1 - 1) / c.group, &lo, &hi);
      it.cost = (it.r1 - it.r0) * (hi - lo + shape.k_rows);
      items.push_back(it);
    }
  }

  // Split decode groups over keys when there are fewer items than twice the threads.
  const int64_t base_items = int64_t(items.size() + groups.size());
  const int64_t want = base_items < 2 * threads ? (2 * threads + base_items - 1) / std::max<int64_t>(base_items, 1) : 1;
  std::vector<SplitGroup> splits;
  int64_t parts = 0;
  for (const Item& g : groups) {
    const AttnSeq& s = seqs[size_t(g.seq)];
    int64_t lo, hi;
    visible_keys(c, s, 0, s.sq - 1, &lo, &hi);
    const int64_t n = std::clamp<int64_t>((hi - lo) / kDecodeMinSplitKeys, 1, std::min(want, kDecodeMaxSplits));
    if (n > 1) splits.push_back(SplitGroup{g.seq, g.heads, parts, n});
    for (int64_t t = 0; t < n; ++t) {
      Item it = g;
      it.split_group = n > 1 ? int64_t(splits.size()) - 1 : -1;
      it.k0 = lo + (hi - lo) * t / n;
      it.k1 = lo + (hi - lo) * (t + 1) / n;
      it.part = n > 1 ? parts + t * g.heads : -1;
      it.cost = g.heads * s.rows(c) * (it.k1 - it.k0 + kLanes);
      items.push_back(it);
    }
    if (n > 1) parts += n * g.heads;
  }
  if (items.empty()) {
    if (before_writes) before_writes();
    return;
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });

  // Not zeroed: attend_decode writes every row's (m, l, acc) of its partials.
  const std::unique_ptr<float[]> partials(new float[size_t(parts * partial_floats)]);
  auto partial_at = [&](float* base) {
    return DecodePartial{base, Dp, base + round_up(kDecodeMaxRows * Dp, kLanes),
                         base + round_up(kDecodeMaxRows * Dp, kLanes) + kLanes};
  };
  const int64_t decode_floats = decode_scratch_floats(c, heads_per_pass);
  const ThreadArenas arenas(std::max(tiled_scratch_floats(c, shape), decode_floats + heads_per_pass * partial_floats));

  // The split that finishes last merges its group (in split order, so the result does not depend on
  // which thread that is); that saves a second parallel region, which costs more than small calls take.
  std::vector<std::atomic<int64_t>> finished(splits.size());
  for (auto& f : finished) f.store(0, std::memory_order_relaxed);
  if (before_writes) before_writes();

  // No more threads than items: waking idle threads costs more than small calls take.
  const int item_threads = int(std::min<int64_t>(threads, int64_t(items.size())));
#pragma omp parallel for schedule(dynamic, 1) num_threads(item_threads)
  for (int64_t k = 0; k < int64_t(items.size()); ++k) {
    const Item& it = items[size_t(k)];
    float* scratch = arenas.mine();
    if (it.tiled) {
      attend_tiled(c, seqs[size_t(it.seq)], shape, it.r0, it.r1, scratch);
      continue;
    }
    DecodePartial out[kDecodeMaxHeads];
    float* base = it.part < 0 ? scratch + decode_floats : partials.get() + it.part * partial_floats;
    for (int64_t h = 0; h < it.heads; ++h) out[h] = partial_at(base + h * partial_floats);
    attend_decode(c, &seqs[size_t(it.seq)], it.heads, it.k0, it.k1, out, scratch);
    if (it.part < 0) {
      for (int64_t h = 0; h < it.heads; ++h) finish_decode(c, seqs[size_t(it.seq + h)], &out[h], 1, scratch);
      continue;
    }
    const SplitGroup& sp = splits[size_t(it.split_group)];
    // acq_rel: the last finisher sees every other split's partials.
    if (finished[size_t(it.split_group)].fetch_add(1, std::memory_order_acq_rel) != sp.splits - 1) continue;
    for (int64_t h = 0; h < sp.heads; ++h) {
      DecodePartial p[kDecodeMaxSplits];
      for (int64_t t = 0; t < sp.splits; ++t)
        p[t] = partial_at(partials.get() + (sp.first_part + t * sp.heads + h) * partial_floats);
      finish_decode(c, seqs[size_t(sp.seq + h)], p, sp.splits, scratch);
    }
  }
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
