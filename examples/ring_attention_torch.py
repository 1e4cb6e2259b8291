"""Ring attention over torch.distributed with flashattn.distributed: each rank holds a zigzag (or
contiguous) shard of one long sequence; forward and backward run as a ring, with autograd.

    torchrun --nproc-per-node 2 examples/ring_attention_torch.py --check                # CPU, gloo
    torchrun --nproc-per-node 8 examples/ring_attention_torch.py --device cuda \\
             --seqlen 131072 --heads 16 --dim 128                                        # GPUs, NCCL

Every rank draws the same full q, k, v and dout from one seeded generator and keeps its shard (a real
model would produce its shard directly). --check gathers out and the gradients and compares them on
rank 0 with a plain single-process flashattn call on the full tensors (meant for small sizes).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import flashattn
from flashattn.distributed import gather, ring_flash_attn_func, shard

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seqlen", type=int, default=2048, help="global sequence length")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--heads-k", type=int, default=None, help="K/V heads (GQA); default: --heads")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--window", type=int, nargs=2, default=(-1, -1), metavar=("LEFT", "RIGHT"))
    p.add_argument("--iters", type=int, default=3, help="timed iterations after one warm-up")
    p.add_argument("--check", action="store_true", help="compare with a single-process call on rank 0")
    return p.parse_args()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    args = parse()
    if args.device == "cuda":
        # torchrun sets LOCAL_RANK: one GPU per process, set before the first NCCL call.
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = DTYPES[args.dtype]
    heads_k = args.heads_k or args.heads
    s = args.seqlen
    options = dict(causal=args.causal, window_size=tuple(args.window))

    gen = torch.Generator().manual_seed(0)
    q_full = torch.randn(args.batch, s, args.heads, args.dim, generator=gen).to(dtype)
    k_full = torch.randn(args.batch, s, heads_k, args.dim, generator=gen).to(dtype)
    v_full = torch.randn(args.batch, s, heads_k, args.dim, generator=gen).to(dtype)
    dout_full = torch.randn(args.batch, s, args.heads, args.dim, generator=gen).to(dtype)
    q, k, v = (shard(x, 1, layout=args.layout).to(device).requires_grad_() for x in (q_full, k_full, v_full))
    dout = shard(dout_full, 1, layout=args.layout).to(device)

    def step():
        # seqlen given: no collective to find the global length (see docs/python.md).
        out = ring_flash_attn_func(q, k, v, layout=args.layout, seqlen=s, **options)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        return out, grads

    out, grads = step()  # warm-up
    times = []
    for _ in range(args.iters):
        sync(device)
        dist.barrier()
        start = time.perf_counter()
        out, grads = step()
        sync(device)
        times.append(time.perf_counter() - start)
    if rank == 0:
        median = sorted(times)[len(times) // 2] if times else float("nan")
        print(f"ring attention: {world} ranks ({args.device}, {args.layout}), B={args.batch} S={s} "
              f"H={args.heads} Hk={heads_k} D={args.dim} {args.dtype} causal={args.causal} "
              f"window={tuple(args.window)}: forward+backward {median * 1e3:.1f} ms (median of {args.iters})")

    if args.check:
        full = [gather(x, 1, layout=args.layout, seqlen=s) for x in (out, *grads)]
        if rank == 0:
            qr, kr, vr = (x.to(device).requires_grad_() for x in (q_full, k_full, v_full))
            ref = flashattn.flash_attn_func(qr, kr, vr, **options)
            ref_grads = torch.autograd.grad(ref, (qr, kr, vr), dout_full.to(device))
            for name, got, want in zip(("out", "dq", "dk", "dv"), full, (ref, *ref_grads)):
                err = (got.float() - want.float()).abs().max().item()
                print(f"  {name}: max |ring - single process| = {err:.3g}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
