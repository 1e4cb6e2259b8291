"""List-scheduling model of the sm80 causal forward's tile order (src/cuda/attn/tile_order.h).

The hardware hands the next CTA of a grid to whichever CTA slot frees first (CTA traces confirm the
order: docs/kernels.md, "Tracing the forward's CTAs"). With tiles of unequal cost (a causal mask: query
tile m of a sequence visits m + 1 key tiles when seqlen_q = seqlen_k), the order of the list decides how
long the last slots run alone. Prints, per sequence length of FlashAttention's sweep (hidden 2048,
batch = 16384 / S), the makespan over the even share (1.0 = no idle slot) of:
  per_head  per head, heaviest query tile first (sm80 before version 14; FA2 lists lightest first)
  v14a      groups of as many heads as fit half the L2, the last group what remains (not kept)
  v14b      tile_order.h: equal groups for the heavy tiles, then about two waves of the lightest tiles of
            every head, heaviest first

A model, not a measurement: slots are independent (two CTAs of an SM share it in reality) and a tile costs
its key tiles plus a fixed start and end (1.5 key tiles: 4.8 us fixed and 3.3 us per key tile in the D = 256
CTA traces). Its v14a and v14b columns agree with what the traces measured (bench/NOTES.md, version 14).

Usage: python3 bench/tile_order_sim.py [--dim 256] [--slots 264] [--block 64] [--fixed 1.5] [--l2-mb 60]
"""
import argparse
import heapq


def makespan(costs, slots):
    free = [0.0] * slots
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def grouped(cost, m_blocks, sizes, light_m=0):
    heavy = [cost(m_blocks - 1 - i) for w in sizes for i in range(m_blocks - light_m) for _ in range(w)]
    return heavy + [cost(m) for m in range(light_m - 1, -1, -1) for _ in range(sum(sizes))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=256, help="head dim (heads = 2048 / dim)")
    ap.add_argument("--slots", type=int, default=264, help="CTAs resident at once (H200: 132 SMs x 2)")
    ap.add_argument("--block", type=int, default=64, help="query and key tile size")
    ap.add_argument("--fixed", type=float, default=1.5, help="a tile's fixed cost, in key tiles")
    ap.add_argument("--l2-mb", type=float, default=60, help="L2 size in MB")
    a = ap.parse_args()
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        m_blocks, heads = s // a.block, (16384 // s) * (2048 // a.dim)
        cost = lambda m: m + 1 + a.fixed
        even = sum(cost(m) for m in range(m_blocks)) * heads / a.slots
        fit = min(heads, max(1, int(a.l2_mb * 2**20 / 2 // (s * a.dim * 4))))
        v14a = [min(fit, heads - first) for first in range(0, heads, fit)]
        groups = -(-heads // fit)
        v14b = [heads // groups + (1 if k < heads % groups else 0) for k in range(groups)]
        tail_work, light_m, work = 2 * a.slots * ((m_blocks + 1) / 2 + a.fixed), 0, 0.0
        while light_m < m_blocks - 1 and work + cost(light_m) * heads <= tail_work:
            work += cost(light_m) * heads
            light_m += 1
        orders = {
            "per_head": grouped(cost, m_blocks, [1] * heads),
            "v14a": grouped(cost, m_blocks, v14a),
            "v14b": grouped(cost, m_blocks, v14b, light_m),
        }
        print(f"S={s:5d} " + " ".join(f"{k}={makespan(v, a.slots) / even:.3f}" for k, v in orders.items()))


if __name__ == "__main__":
    main()
