"""PyTorch CPU scaled_dot_product_attention on the shapes of bench/results/*-cpu-isa.md, timed like
`flashattn-bench --cpu-time`: process CPU time divided by the thread count (busy time per core, which
time slicing on a shared machine does not inflate), and wall clock; medians of --iters runs.

Usage: python bench/torch_sdpa_cpu.py --threads 1 --dtype bf16 --heads 8 --sq 512 --sk 4096 --dim 128
       [--heads-k 8] [--causal] [--mode fwd|bwd] [--iters 5]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="bf16")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--heads-k", type=int, default=0)
    ap.add_argument("--sq", type=int, default=512)
    ap.add_argument("--sk", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--mode", choices=["fwd", "bwd"], default="fwd")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--expand-kv", action="store_true",
                    help="GQA: repeat K/V to the query heads before timing instead of enable_gqa")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    hk = a.heads_k or a.heads
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, a.heads, a.sq, a.dim, generator=g).to(dt)
    k = torch.randn(1, hk, a.sk, a.dim, generator=g).to(dt)
    v = torch.randn(1, hk, a.sk, a.dim, generator=g).to(dt)
    if hk != a.heads and a.expand_kv:
        k, v = (t.repeat_interleave(a.heads // hk, dim=1) for t in (k, v))
    gqa = {"enable_gqa": True} if k.shape[1] != a.heads else {}
    if a.mode == "bwd":
        for t in (q, k, v):
            t.requires_grad_(True)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal, **gqa)
        dout = torch.randn_like(out)

        def run():
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    else:

        def run():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=a.causal, **gqa)

    run()
    cpu, wall = [], []
    for _ in range(a.iters):
        c0, w0 = time.process_time(), time.perf_counter()
        run()
        cpu.append((time.process_time() - c0) / a.threads)
        wall.append(time.perf_counter() - w0)
    flops = 4.0 * a.heads * a.sq * a.sk * a.dim * (0.5 if a.causal else 1.0) * (2.5 if a.mode == "bwd" else 1.0)
    c, w = statistics.median(cpu), statistics.median(wall)
    print(f"torch {torch.__version__} sdpa {a.mode} {a.dtype} H={a.heads}/{hk} {a.sq}x{a.sk} D={a.dim}"
          f"{' causal' if a.causal else ''}{' kv expanded' if a.expand_kv else ''} threads={a.threads}: cpu-time {c * 1e3:.2f} ms"
          f" ({flops / c / 1e9:.1f} GFLOP/s per core-time), wall {w * 1e3:.2f} ms ({flops / w / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
