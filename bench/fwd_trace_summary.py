"""Summarises the CTA trace of a trace build of the sm80 forward (docs/kernels.md, "Tracing the forward's CTAs").

Input: the CSV that FLASHATTN_SM80_TRACE_FILE names (call, cta, sm, start_ns, end_ns, m_blocks, tiles, causal,
m_block; times from the call's first CTA start). Calls are numbered per process: when several processes
append to one file, each new call 0 starts a new call here. For each call: the kernel's span; the SM time lost with no CTA on the
SM, split into before the SM's first CTA, between its CTAs, and after its last one (the tail); when the
number of running CTAs falls below 90% of the peak for good; and, for one-tile-per-CTA grids, the mean CTA time
per query tile (the cost model: tile m of a causal row visits m + 1 key tiles).

Usage: python3 bench/fwd_trace_summary.py TRACE.csv [--calls 0,1]
"""
import argparse
import collections
import csv


def summarise(rows):
    span = max(r["end"] for r in rows)
    by_sm = collections.defaultdict(list)
    for r in rows:
        by_sm[r["sm"]].append((r["start"], r["end"]))
    sms = len(by_sm)
    before = between = after = 0
    for ivs in by_sm.values():
        ivs.sort()
        before += ivs[0][0]
        reach = ivs[0][1]
        for s, e in ivs[1:]:
            if s > reach:
                between += s - reach
            reach = max(reach, e)
        after += span - reach
    total = span * sms
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows])
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    running, below = 0, None
    for t, d in events:  # the tail: from the last moment at least 90% of the peak ran
        running += d
        if running >= 0.9 * peak:
            below = None
        elif below is None:
            below = t
    print(f"  span {span / 1e3:.1f} us on {sms} SMs, {len(rows)} CTAs, peak {peak} running")
    print(f"  SM time with no CTA: {100 * (before + between + after) / total:.1f}% "
          f"(before the first {100 * before / total:.1f}%, between CTAs {100 * between / total:.1f}%, "
          f"after the last {100 * after / total:.1f}%)")
    if below is not None:
        print(f"  running CTAs below 90% of the peak for good from {below / 1e3:.1f} us "
              f"({100 * below / span:.1f}% of the span)")
    m_blocks, tiles = rows[0]["m_blocks"], rows[0]["tiles"]
    if len(rows) == tiles:  # one tile per CTA
        per_m = collections.defaultdict(list)
        for r in rows:
            per_m[r["m"]].append(r["end"] - r["start"])
        picks = sorted(set([0, 1, 2, m_blocks // 4, m_blocks // 2, m_blocks - 1]))
        print("  mean CTA time by query tile: " + ", ".join(
            f"m={m} {sum(per_m[m]) / len(per_m[m]) / 1e3:.2f} us" for m in picks if per_m[m]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--calls", default="", help="calls to summarise (default all)")
    a = ap.parse_args()
    calls = collections.defaultdict(list)
    call = -1
    with open(a.trace) as f:
        for row in csv.reader(f):
            if len(row) == 8:  # traces written before the query tile was recorded: the per-head order
                row.append(str(int(row[5]) - 1 - int(row[1]) % int(row[5])))
            _, cta, sm, s, e, mb, tiles, causal, m = map(int, row)
            if cta == 0:
                call += 1
            calls[call].append(dict(cta=cta, sm=sm, start=s, end=e, m_blocks=mb, tiles=tiles, causal=causal, m=m))
    want = {int(x) for x in a.calls.split(",") if x} or set(calls)
    for c in sorted(want & set(calls)):
        rows = calls[c]
        print(f"call {c}: {'causal' if rows[0]['causal'] else 'unmasked'}, {rows[0]['m_blocks']} query tiles per head")
        summarise(rows)


if __name__ == "__main__":
    main()
