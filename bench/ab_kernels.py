"""Interleaved A/B of several flashattn-bench builds (or one build under several environments) on one problem
set of one backend (the kernels alone; cuda_sm80 unless AB_IMPL names another).

Each configuration is timed in ROUNDS rounds; a round runs every build once, in an order rotated per round,
so that the GPU's drift over a run (clocks, neighbours on a shared machine) falls on all builds alike. For
each build the result is the median over rounds of (first build's time / this build's time): above 1, that
build is faster than the first. Problems follow FlashAttention's sweep: bf16, H = 2048 / D, B = 16384 / S.

Usage: python3 bench/ab_kernels.py OUT.json MODE D:S:CAUSAL[,D:S:CAUSAL...] ROUNDS NAME=BENCH[@VAR=VALUE,...] ...
  MODE fwd, bwd or fwdbwd; CAUSAL 0 or 1; @VAR=VALUE,... sets environment variables for that arm (a kernel
  variant switch such as FLASHATTN_SM90_PERSISTENT=0), and items that start with -- are passed to that arm's
  flashattn-bench (e.g. @--deterministic). Results are appended to OUT.json and printed one line per problem.
Example (bench/NOTES.md, sm80 version 11):
  python3 bench/ab_kernels.py ab.json fwd 256:512:0,128:4096:0 5 v10=/tmp/v10/flashattn-bench new=.gpu/bin/flashattn-bench
  AB_IMPL=cuda_sm90 python3 bench/ab_kernels.py ab.json fwd 128:2048:0 5 on=B off=B@FLASHATTN_SM90_PERSISTENT=0
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def time_once(arm, mode, dim, seqlen, causal):
    binary, _, env_spec = arm.partition("@")
    items = [kv for kv in env_spec.split(",") if kv]
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in items if not kv.startswith("--")))
    extra = [kv for kv in items if kv.startswith("--")]
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [binary, "--device", "cuda", "--impl", os.environ.get("AB_IMPL", "cuda_sm80"), "--dtype", "bf16",
               "--dim", str(dim),
               "--seqlen", str(seqlen), "--heads", str(2048 // dim), "--batch", str(max(1, 16384 // seqlen)),
               "--mode", mode, "--no-check", "--iters", "30" if mode == "fwd" else "15", "--warmup", "5",
               "--json", f.name] + (["--causal"] if causal else []) + extra
        subprocess.run(cmd, check=True, capture_output=True, timeout=60, env=env)
        return json.load(open(f.name))[0]["median_ms"]


def main(argv):
    if len(argv) < 6:
        sys.exit(__doc__)
    out, mode, spec, rounds = argv[1], argv[2], argv[3], int(argv[4])
    arms = [a.split("=", 1) for a in argv[5:]]
    configs = [(int(d), int(s), c == "1") for d, s, c in (x.split(":") for x in spec.split(","))]
    rows = json.load(open(out)) if os.path.exists(out) else []
    for dim, seqlen, causal in configs:
        times = {name: [] for name, _ in arms}
        for r in range(rounds):
            k = r % len(arms)
            for name, binary in arms[k:] + arms[:k]:
                times[name].append(time_once(binary, mode, dim, seqlen, causal))
        base = arms[0][0]
        row = dict(mode=mode, dim=dim, seqlen=seqlen, causal=causal,
                   ms={k: statistics.median(v) for k, v in times.items()}, rounds=times,
                   speed_vs_first={k: statistics.median(o / n for o, n in zip(times[base], v))
                                   for k, v in times.items()})
        rows.append(row)
        print(f"{mode} D{dim} S{seqlen} {'causal' if causal else 'full'}: " +
              " ".join(f"{k} {row['ms'][k]:.4f} ({row['speed_vs_first'][k]:.3f})" for k in times), flush=True)
        json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv)
