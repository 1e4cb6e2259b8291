"""Per-block timeline of one decode call (instrumented build: attention_kernel.cuh prints one TL line per
block). Usage: python3 timeline.py B S SQ [splits] > lines; then --parse FILE."""
import os, sys, subprocess

def run(b, s, sq, splits, hq=32, hk=8, d=128):
    import torch, flashattn
    dt = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(1)
    k = torch.randn(b, s, hk, d, dtype=dt, device="cuda", generator=g)
    v = torch.randn(b, s, hk, d, dtype=dt, device="cuda", generator=g)
    q = torch.randn(b, sq, hq, d, dtype=dt, device="cuda", generator=g)
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        flush.zero_()
        flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=splits)
        torch.cuda.synchronize()

def parse(path):
    import statistics as st
    rows = [l.split() for l in open(path) if l.startswith("TL ")]
    n = len(rows) // 3
    rows = rows[-n:]
    g0 = [int(r[3]) for r in rows]; g7 = [int(r[4]) for r in rows]
    base = min(g0)
    c = [[int(x) for x in r[5:12]] for r in rows]
    # clock rate from the longest block: cycles / ns
    ghz = st.median([c[i][6] / max(1, g7[i] - g0[i]) for i in range(n) if g7[i] > g0[i]])
    names = ["prologue(seqlen+issue)", "first tile arrives", "loop end", "epilogue staged", "partial written+fence",
             "arrival counted", "end"]
    print(f"{path}: {n} blocks, SMs {len(set(r[2] for r in rows))}, clock ~{ghz:.2f} GHz, tiles/block "
          f"{sorted(set(r[12] for r in rows))}, last blocks {sum(int(r[13]) for r in rows)}")
    print(f"  start skew (globaltimer): min 0, median {st.median([x - base for x in g0])/1e3:.2f} us, max {max(g0) - base:.0f} ns")
    print(f"  end (globaltimer from first start): median {st.median([x - base for x in g7])/1e3:.2f} us, max {(max(g7) - base)/1e3:.2f} us")
    for j, nm in enumerate(names):
        vals = [c[i][j] / ghz / 1e3 for i in range(n)]
        print(f"  {nm:26s} us from block start: min {min(vals):6.2f} med {st.median(vals):6.2f} max {max(vals):6.2f}")
    last = [i for i in range(n) if rows[i][13] == "1"]
    for i in last[:3]:
        print(f"  last block {rows[i][1]}: start +{(g0[i]-base)/1e3:.2f} us, " +
              ", ".join(f"{c[i][j]/ghz/1e3:.2f}" for j in range(7)))

if __name__ == "__main__":
    if sys.argv[1] == "--parse":
        for p in sys.argv[2:]:
            parse(p)
    else:
        a = [int(x) for x in sys.argv[1:]]
        run(a[0], a[1], a[2], a[3] if len(a) > 3 else 0)
