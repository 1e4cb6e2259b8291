"""Host time of eager calls through the Python package, next to PyTorch SDPA on the same data.

For n back-to-back calls: host = time to issue them (no sync), wall = until the GPU is done. When host per
call exceeds the GPU time per call, the calls are host-bound and wall follows host: that is what an eager
decode loop (no CUDA graph) or a small prefill sees. Cases:
  prefill_fwd      B 32, S 512, H 16, D 128, bf16, causal, under no_grad
  prefill_fwdbwd   the same, forward then torch.autograd.grad
  decode_step      B 1, one query token, 4096 cached keys, H 32 / Hk 8, D 128, bf16 (flash_attn_with_kvcache;
                   SDPA gets the same q, k, v with enable_gqa)
plus the layers of a flashattn forward: flashattn._ops.forward (no torch op) and flashattn._C.fwd (native).
With --device cpu the same calls run on CPU tensors of tiny shapes (B 1, S 16, H 2, D 32; a 64-key cache),
where a call's time is almost all host overhead (host = wall: the CPU backends are synchronous).

    python bench/host_cost.py --out bench/results/host_cost.json
    python bench/host_cost.py --device cpu --out host_cost_cpu.json
"""

import argparse
import json
import sys
import time


def per_call_us(torch, fn, n, device):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(10):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - start) / n * 1e6
    sync()
    wall = (time.perf_counter() - start) / n * 1e6
    return host, wall


def cases(torch, device):
    import flashattn
    from flashattn import _C, _ops
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    gen = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    cuda = device == "cuda"
    b, s, h, d = (32, 512, 16, 128) if cuda else (1, 16, 2, 32)
    step_heads, step_heads_k, cache = (32, 8, 4096) if cuda else (2, 1, 64)

    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=gen)

    q, k, v, dout = (rand(b, s, h, d) for _ in range(4))
    ql, kl, vl = (x.clone().requires_grad_() for x in (q, k, v))
    qt, kt, vt, dt = (x.transpose(1, 2) for x in (q, k, v, dout))
    qtl, ktl, vtl = (x.clone().requires_grad_() for x in (qt, kt, vt))

    def ours_fwd():
        with torch.no_grad():
            flashattn.flash_attn_func(q, k, v, causal=True)

    backends = [SDPBackend.FLASH_ATTENTION] if cuda else [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]

    def sdpa_fwd():
        with torch.no_grad(), sdpa_kernel(backends):
            sdpa(qt, kt, vt, is_causal=True)

    def ours_fwdbwd():
        out = flashattn.flash_attn_func(ql, kl, vl, causal=True)
        torch.autograd.grad(out, (ql, kl, vl), dout)

    def sdpa_fwdbwd():
        with sdpa_kernel(backends):
            out = sdpa(qtl, ktl, vtl, is_causal=True)
        torch.autograd.grad(out, (qtl, ktl, vtl), dt)

    out, lse = torch.empty_like(q), torch.empty(b, h, s, device=device, dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream if cuda else 0

    def ops_fwd():
        _ops.forward(q, k, v, causal=True)

    def native_fwd():
        _C.fwd(q, k, v, out, lse, causal=True, stream=stream)

    step_q = rand(1, 1, step_heads, d)
    step_k_cache, step_v_cache = rand(1, cache, step_heads_k, d), rand(1, cache, step_heads_k, d)
    lengths = torch.full((1,), cache, dtype=torch.int32, device=device)
    step_qt, step_kt, step_vt = (x.transpose(1, 2) for x in (step_q, step_k_cache, step_v_cache))

    def ours_decode():
        with torch.no_grad():
            flashattn.flash_attn_with_kvcache(step_q, step_k_cache, step_v_cache, cache_seqlens=lengths)

    def sdpa_decode():
        with torch.no_grad():
            sdpa(step_qt, step_kt, step_vt, enable_gqa=True)

    return [
        ("prefill_fwd", "flashattn", ours_fwd),
        ("prefill_fwd", "sdpa_flash", sdpa_fwd),
        ("prefill_fwd", "flashattn._ops.forward", ops_fwd),
        ("prefill_fwd", "flashattn._C.fwd", native_fwd),
        ("prefill_fwdbwd", "flashattn", ours_fwdbwd),
        ("prefill_fwdbwd", "sdpa_flash", sdpa_fwdbwd),
        ("decode_step", "flashattn", ours_decode),
        ("decode_step", "sdpa", sdpa_decode),
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=200, help="calls per measurement (default 200)")
    p.add_argument("--repeats", type=int, default=5, help="measurements per case; the lowest host time is kept")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="tensors' device (default cuda)")
    p.add_argument("--out", default="host_cost.json", help="JSON output path")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("host_cost.py: no CUDA device (--device cpu measures the host path on CPU tensors)")
    rows = []
    for case, impl, fn in cases(torch, args.device):
        host, wall = min(per_call_us(torch, fn, args.calls, args.device) for _ in range(args.repeats))
        rows.append(dict(case=case, impl=impl, host_us=round(host, 1), wall_us=round(wall, 1)))
        print(f"{case:15s} {impl:24s} host {host:8.1f} us/call   wall {wall:8.1f} us/call", flush=True)
    with open(args.out, "w") as f:
        name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        json.dump(dict(device=name, torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
