#include "dist/block_tasks.h"

#include <algorithm>
#include <optional>

namespace flashattn::dist::detail {

namespace {

// Queries at global positions [q0, q1) against keys at [k0, k1). flash-attn's window is relative to the
// bottom-right diagonal: local query i sees local keys [i + d - left', i + d + right'] with
// d = Sk - Sq. Globally, query q0 + i sees keys k0 + j with q0 + i - left <= k0 + j <= q0 + i + right,
// i.e. j in [i + (q0 - k0) - left, i + (q0 - k0) + right]. Writing q0 - k0 = d + delta gives
// left' = left - delta and right' = right + delta, delta = (q0 - k0) - (Sk - Sq) = q1 - k1.
// Both must be >= 0 to be expressible (flash-attn has no negative windows): that is why the ranges are
// trimmed first to the rows that see something and the keys that something sees, after which
// right' >= 0 and left' >= 0 hold (see docs/distributed.md for the short proof).
std::optional<BlockTask> plan_pair(int64_t q0, int64_t q1, int64_t k0, int64_t k1, GlobalWindow w) {
  if (w.right >= 0) q0 = std::max(q0, k0 - w.right);  // rows before this see no key of the block
  if (w.left >= 0) q1 = std::min(q1, k1 + w.left);    // rows from here on have slid past the block
  if (q0 >= q1 || k0 >= k1) return std::nullopt;
  if (w.left >= 0) k0 = std::max(k0, q0 - w.left);  // keys no row reaches
  if (w.right >= 0) k1 = std::min(k1, q1 + w.right);
  if (k0 >= k1) return std::nullopt;

  BlockTask t;
  t.q_row = q0;  // global positions for now; the caller translates them to local rows
  t.q_rows = q1 - q0;
  t.k_row = k0;
  t.k_rows = k1 - k0;
  const bool sees_last_key = w.right < 0 || q0 + w.right >= k1 - 1;  // the first row reaches the last key
  const bool sees_first_key = w.left < 0 || q1 - 1 - w.left <= k0;   // the last row reaches the first key
  if (sees_last_key && sees_first_key) return t;                     // unmasked
  const int64_t delta = q1 - k1;
  t.window_left = w.left < 0 ? -1 : w.left - delta;
  t.window_right = w.right < 0 ? -1 : w.right + delta;
  return t;
}

// Two unmasked calls merge when they share the query rows and their keys are adjacent, or share the keys
// and their queries are adjacent: one larger call parallelises better than two small ones.
bool try_coalesce(BlockTask& a, const BlockTask& b) {
  if (!a.full() || !b.full() || a.seq != b.seq) return false;
  if (a.q_row == b.q_row && a.q_rows == b.q_rows && a.k_row + a.k_rows == b.k_row) {
    a.k_rows += b.k_rows;
    return true;
  }
  if (a.k_row == b.k_row && a.k_rows == b.k_rows && a.q_row + a.q_rows == b.q_row) {
    a.q_rows += b.q_rows;
    return true;
  }
  return false;
}

}  // namespace

std::vector<BlockTask> plan_block_tasks(const RankShard& q, const RankShard& kv, GlobalWindow window) {
  std::vector<BlockTask> tasks;
  for (size_t s = 0; s < q.seqs.size() && s < kv.seqs.size(); ++s) {
    const SeqShard& qs = q.seqs[s];
    const SeqShard& ks = kv.seqs[s];
    for (const Segment& qseg : qs.segments) {
      for (const Segment& kseg : ks.segments) {
        std::optional<BlockTask> t =
            plan_pair(qseg.start, qseg.start + qseg.length, kseg.start, kseg.start + kseg.length, window);
        if (!t) continue;
        t->seq = s;
        t->q_row += qs.row_base + qseg.local_row - qseg.start;
        t->k_row += ks.row_base + kseg.local_row - kseg.start;
        tasks.push_back(*t);
      }
    }
  }
  // Merging can enable further merges (two query segments against the whole block): repeat until stable.
  for (bool merged = true; merged;) {
    merged = false;
    std::vector<BlockTask> out;
    for (const BlockTask& t : tasks) {
      if (!out.empty() && try_coalesce(out.back(), t)) {
        merged = true;
      } else {
        out.push_back(t);
      }
    }
    tasks = std::move(out);
  }
  return tasks;
}

}  // namespace flashattn::dist::detail
