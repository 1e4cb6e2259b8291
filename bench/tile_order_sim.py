"""List-scheduling simulation of the sm80 causal forward's tile order (src/cuda/sm80/tile_order.h).

The hardware hands the next CTA of a grid to whichever CTA slot frees first. With tiles of unequal cost (a
causal mask: query tile m of a sequence visits m + 1 key tiles when seqlen_q = seqlen_k), the order of the
list decides how long the last slots run alone. This prints, per sequence length of FlashAttention's sweep
(hidden 2048, batch = 16384 / S), the makespan over the even share (1.0 = no idle slot) of several orders:
per head heaviest first (sm80 before version 14), per head lightest first (FlashAttention-2's grid), all
tiles heaviest first, and heads in groups of G, each heaviest first (version 14).

A model, not a measurement: each slot is independent (two CTAs of an SM share it in reality, so an idle
partner speeds the other up) and a tile costs its key tiles plus a fixed start.

Usage: python3 bench/tile_order_sim.py [--dim 256] [--slots 264] [--block 64] [--start 0.5]
"""
import argparse
import heapq


def makespan(costs, slots):
    free = [0.0] * slots
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=256, help="head dim (heads = 2048 / dim)")
    ap.add_argument("--slots", type=int, default=264, help="CTAs resident at once (H200, D = 256: 132 SMs x 2)")
    ap.add_argument("--block", type=int, default=64, help="query and key tile size")
    ap.add_argument("--start", type=float, default=0.5, help="cost of a tile's start, in key tiles")
    a = ap.parse_args()
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        m_blocks, heads = s // a.block, (16384 // s) * (2048 // a.dim)
        cost = lambda m: m + 1 + a.start
        even = sum(cost(m) for m in range(m_blocks)) * heads / a.slots
        orders = {
            "head_heavy": [cost(m_blocks - 1 - i) for _ in range(heads) for i in range(m_blocks)],
            "head_light": [cost(i) for _ in range(heads) for i in range(m_blocks)],
            "all_heavy": [cost(m_blocks - 1 - i) for i in range(m_blocks) for _ in range(heads)],
        }
        for g in (4, 8, 16, 32, 64):
            if g < heads:
                sizes = [min(g, heads - first) for first in range(0, heads, g)]
                orders[f"groups{g}"] = [cost(m_blocks - 1 - i) for w in sizes for i in range(m_blocks) for _ in range(w)]
        print(f"S={s:5d} " + " ".join(f"{k}={makespan(v, a.slots) / even:.3f}" for k, v in orders.items()))


if __name__ == "__main__":
    main()
