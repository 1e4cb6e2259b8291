"""Interleaved A/B of builds of the flashattn Python package on the decode benchmark.

Each arm is NAME=SITE, a directory holding an installed flashattn (`pip install --target SITE WHEEL`),
optionally followed by environment settings for that arm's process, NAME=SITE,VAR=VALUE,... (an A/B of a
benchmarking switch of one build). A round runs bench/decode_bench.py --no-peers once per arm, in an order rotated every round, with the
decode_bench flags given after `--`. Per configuration the result is each arm's median time over the
rounds and the median over rounds of the per-round ratio first arm / arm (> 1: the arm is faster than
the first). On a shared GPU the ratios of interleaved rounds are what can be trusted, not one run's
absolute times (bench/NOTES.md).

    python bench/ab_decode.py --arms old=/tmp/fa-old new=/tmp/fa-new --rounds 3 --out ab.json -- \\
        --dims 128 --ratios 32/8 --graph --batches 1 16 --contexts 4096 --sq 1 8 --pages 0 16
    python bench/ab_decode.py --arms pairs=/tmp/fa single=/tmp/fa,FLASHATTN_DECODE_ROW_PAIRS=0 --out ab.json -- ...
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CONFIG_KEYS = ("head_dim", "heads", "heads_k", "batch", "context", "seqlen_q", "page_size")


def parse_arm(arm):
    name, spec = arm.split("=", 1)
    site, *settings = spec.split(",")
    return name, site, dict(s.split("=", 1) for s in settings)


def run_arm(site, settings, bench_args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "decode.json")
        env = dict(os.environ, PYTHONPATH=site, **settings)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_bench.py")
        subprocess.run([sys.executable, script, "--no-peers", "--out", out, *bench_args], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows = json.load(f)["rows"]
    return {tuple(r[k] for k in CONFIG_KEYS): r["cuda_decode_ms"] * 1000.0 for r in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", required=True, help="NAME=SITE, the first is the reference")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True, help="JSON path")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then decode_bench.py flags")
    args = parser.parse_args()
    arms = [parse_arm(a) for a in args.arms]
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args

    times = {name: [] for name, _, _ in arms}  # per arm, per round: {config: us}
    for r in range(args.rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        for name, site, settings in order:
            times[name].append(run_arm(site, settings, bench_args))
            print(f"round {r + 1}/{args.rounds}: {name} done", file=sys.stderr, flush=True)

    ref = arms[0][0]
    rows = []
    for cfg in times[ref][0]:
        row = dict(zip(CONFIG_KEYS, cfg))
        row["us"] = {name: statistics.median(t[cfg] for t in times[name]) for name, _, _ in arms}
        row["rounds_us"] = {name: [t[cfg] for t in times[name]] for name, _, _ in arms}
        row["ratio_vs_" + ref] = {
            name: statistics.median(a[cfg] / b[cfg] for a, b in zip(times[ref], times[name])) for name, _, _ in arms
        }
        rows.append(row)
        cells = "  ".join(f"{n} {row['us'][n]:8.1f} us ({row['ratio_vs_' + ref][n]:.3f}x)" for n, _, _ in arms)
        print(f"D{cfg[0]} {cfg[1]}/{cfg[2]} B{cfg[3]} ctx{cfg[4]} Sq{cfg[5]} page{cfg[6]}: {cells}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"arms": {n: [site, settings] for n, site, settings in arms}, "rounds": args.rounds, "bench_args": bench_args, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
