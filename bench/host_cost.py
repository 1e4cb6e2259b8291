"""Host cost per call of every public function of the Python package, eager, next to PyTorch SDPA on the
same data in the same run, and a breakdown of where a call's microseconds go.

For n back-to-back calls: host = time to issue them (no sync), wall = until the device is done. When host
per call exceeds the device time per call, the calls are host-bound and wall follows host: that is what an
eager decode loop (no CUDA graph) or a small prefill sees.

Shapes (--device cuda): decode = batch 8, one query token, 1100 cached keys, 16 query / 8 KV heads, D 128,
bf16 (the 1B Llama of bench/hf_generate.py at generate time); prefill = batch 4, 1024 tokens, the same
heads, causal. With --device cpu the same calls run on CPU tensors of tiny shapes (decode batch 2 over 64
keys, 2 / 1 heads, D 32; prefill batch 1 x 16 tokens, fp32), where a call's time is almost all host
overhead (host = wall: the CPU backends are synchronous) -- a measure of the Python and binding layers,
not of the GPU path (whose figures need the GPU machine: stream lookup and the workspace allocator only
exist there).

Sections:
  calls      each public function and its SDPA counterpart (transformers' functions when installed);
  breakdown  the layers of one forward and one decode call, outermost first, and the pieces a call is
             made of (argument conversion per tensor, output allocation, stream lookup, option handling),
             each timed alone; `n/a` when this version of the package has no such piece.

    python bench/host_cost.py                          # CUDA, prints a table
    OMP_NUM_THREADS=1 python bench/host_cost.py --device cpu --clock process --out host_cost_cpu.json
"""

import argparse
import json
import sys
import time


def per_call_us(torch, fn, n, device, clock):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(10):
        fn()
    sync()
    start = clock()
    for _ in range(n):
        fn()
    host = (clock() - start) / n * 1e6
    sync()
    wall = (clock() - start) / n * 1e6
    return host, wall


class Shapes:
    def __init__(self, device):
        cuda = device == "cuda"
        self.dtype = "bfloat16" if cuda else "float32"
        self.decode = (8, 1100, 16, 8, 128) if cuda else (2, 64, 2, 1, 32)  # batch, keys, heads, heads_k, dim
        self.prefill = (4, 1024, 16, 8, 128) if cuda else (1, 16, 2, 1, 32)  # batch, seqlen, heads, heads_k, dim


def call_cases(torch, device):
    """(case, implementation, function) for every public call and its SDPA counterpart."""
    import flashattn
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    shapes = Shapes(device)
    dtype = getattr(torch, shapes.dtype)
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=gen)

    cases = []
    no_grad = torch.no_grad()

    # Prefill: dense, packed, varlen (the same batch as equal-length sequences), fwd+bwd.
    b, s, h, hk, d = shapes.prefill
    q, k, v = rand(b, s, h, d), rand(b, s, hk, d), rand(b, s, hk, d)
    qkv = rand(b, s, 3, h, d)
    kv = torch.stack((k, v), dim=2)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device=device)
    qr, kr, vr, qkvr, kvr = (x.reshape(b * s, *x.shape[2:]) for x in (q, k, v, qkv, kv))

    def case(name, impl, fn, grad=False):
        if grad:
            cases.append((name, impl, fn))
        else:

            def run():
                with no_grad:
                    fn()

            cases.append((name, impl, run))

    case("prefill_fwd", "flash_attn_func", lambda: flashattn.flash_attn_func(q, k, v, causal=True))
    case("prefill_fwd", "flash_attn_qkvpacked_func", lambda: flashattn.flash_attn_qkvpacked_func(qkv, causal=True))
    case("prefill_fwd", "flash_attn_kvpacked_func", lambda: flashattn.flash_attn_kvpacked_func(q, kv, causal=True))
    case("prefill_fwd", "flash_attn_varlen_func",
         lambda: flashattn.flash_attn_varlen_func(qr, kr, vr, cu, cu, s, s, causal=True))  # fmt: skip
    case("prefill_fwd", "flash_attn_varlen_qkvpacked_func",
         lambda: flashattn.flash_attn_varlen_qkvpacked_func(qkvr, cu, s, causal=True))  # fmt: skip
    case("prefill_fwd", "flash_attn_varlen_kvpacked_func",
         lambda: flashattn.flash_attn_varlen_kvpacked_func(qr, kvr, cu, cu, s, s, causal=True))  # fmt: skip
    case("prefill_fwd", "sdpa", lambda: sdpa(qt, kt, vt, is_causal=True, enable_gqa=True))

    ql, kl, vl = (x.clone().requires_grad_() for x in (q, k, v))
    qtl, ktl, vtl = (x.clone().requires_grad_() for x in (qt, kt, vt))
    dout, doutt = rand(b, s, h, d), rand(b, h, s, d)

    def ours_fwdbwd():
        out = flashattn.flash_attn_func(ql, kl, vl, causal=True)
        torch.autograd.grad(out, (ql, kl, vl), dout)

    def sdpa_fwdbwd():
        out = sdpa(qtl, ktl, vtl, is_causal=True, enable_gqa=True)
        torch.autograd.grad(out, (qtl, ktl, vtl), doutt)

    case("prefill_fwdbwd", "flash_attn_func + backward", ours_fwdbwd, grad=True)
    case("prefill_fwdbwd", "sdpa + backward", sdpa_fwdbwd, grad=True)

    # Decode: one query token over a cache; read-only, and appending one token.
    b, keys, h, hk, d = shapes.decode
    step_q = rand(b, 1, h, d)
    k_cache, v_cache = rand(b, keys + 8, hk, d), rand(b, keys + 8, hk, d)
    k_new, v_new = rand(b, 1, hk, d), rand(b, 1, hk, d)
    lengths = torch.full((b,), keys, dtype=torch.int32, device=device)
    lengths_before = torch.full((b,), keys - 1, dtype=torch.int32, device=device)
    kc, vc = k_cache[:, :keys], v_cache[:, :keys]
    qt1, kt1, vt1 = (x.transpose(1, 2) for x in (step_q, kc, vc))

    case("decode", "flash_attn_with_kvcache", lambda: flashattn.flash_attn_with_kvcache(
        step_q, k_cache, v_cache, cache_seqlens=lengths))  # fmt: skip
    case("decode", "flash_attn_with_kvcache append", lambda: flashattn.flash_attn_with_kvcache(
        step_q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths_before, causal=True))  # fmt: skip
    case("decode", "flash_attn_func", lambda: flashattn.flash_attn_func(step_q, kc, vc, causal=True))
    case("decode", "sdpa", lambda: sdpa(qt1, kt1, vt1, enable_gqa=True))
    cases += transformers_cases(torch, device, step_q, kc, vc, no_grad)
    return cases


def transformers_cases(torch, device, step_q, kc, vc, no_grad):
    """The attention and mask functions transformers calls for a decode step: ours against its SDPA ones."""
    try:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import causal_mask_function, sdpa_mask

        import flashattn.integrations.transformers as fa_hf
    except ImportError:
        return []

    class Module(torch.nn.Module):
        is_causal = True

        def __init__(self, groups):
            super().__init__()
            self.num_key_value_groups = groups

    module = Module(step_q.shape[2] // kc.shape[2]).eval()
    query, key, value = (x.transpose(1, 2) for x in (step_q, kc, vc))  # transformers' (batch, heads, seq, dim)
    scaling = query.shape[-1] ** -0.5
    batch, keys = kc.shape[0], kc.shape[1]
    padding = torch.ones(batch, keys, dtype=torch.bool, device=device)
    mask_args = dict(batch_size=batch, q_length=1, kv_length=keys, q_offset=keys - 1, kv_offset=0,
                     mask_function=causal_mask_function, attention_mask=padding, allow_is_causal_skip=True,
                     dtype=step_q.dtype, device=torch.device(device))  # fmt: skip
    cases = []

    def case(impl, fn):
        def run():
            with no_grad:
                fn()

        cases.append(("decode_transformers", impl, run))

    case("flashattn attention", lambda: fa_hf.attention_forward(module, query, key, value, None, scaling=scaling))
    case("sdpa attention", lambda: sdpa_attention_forward(module, query, key, value, None, scaling=scaling))
    case("flashattn mask", lambda: fa_hf.padding_mask(**mask_args))
    case("sdpa mask", lambda: sdpa_mask(**mask_args))
    return cases


def breakdown_cases(torch, device):
    """The layers of a forward and of a decode call, and the pieces they are made of, each timed alone."""
    import flashattn
    from flashattn import _C

    shapes = Shapes(device)
    dtype = getattr(torch, shapes.dtype)
    cuda = device == "cuda"
    b, s, h, hk, d = shapes.prefill
    q, k, v = (torch.randn(b, s, x, d, device=device, dtype=dtype) for x in (h, hk, hk))
    out, lse = torch.empty_like(q), torch.empty(b, h, s, device=device, dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream if cuda else 0
    torch_ops = __import__("flashattn._torch_ops", fromlist=["_"])
    ops = __import__("flashattn._ops", fromlist=["_"])

    def optional(owner, name):
        return getattr(owner, name, None)

    rows = []

    def row(name, fn):
        rows.append(("breakdown", name, fn))

    no_grad = torch.no_grad()

    def under_no_grad(fn):
        def run():
            with no_grad:
                fn()

        return run

    # Forward, outermost layer first: each layer's own cost is the difference to the next.
    row("fwd: flash_attn_func", under_no_grad(lambda: flashattn.flash_attn_func(q, k, v, causal=True)))
    attention = optional(torch_ops, "attention")
    if attention is not None:
        row("fwd: _torch_ops.attention", under_no_grad(lambda: attention(
            q, k, v, None, None, None, None, 0.0, None, True, (-1, -1), 0.0, None, False)))  # fmt: skip
    row("fwd: flashattn.forward (no autograd)", lambda: flashattn.forward(q, k, v, causal=True))
    row("fwd: _C.fwd, keywords", lambda: _C.fwd(q, k, v, out, lse, causal=True, stream=stream))
    row("fwd: _C.fwd, positional", lambda: _C.fwd(q, k, v, out, lse, None, None, 0, 0, None, True, -1, -1, None,
                                                   0.0, 0.0, 0, 0, "", stream))  # fmt: skip
    row("fwd: _C.fwd without softmax_lse (one array less)", lambda: _C.fwd(
        q, k, v, out, None, None, None, 0, 0, None, True, -1, -1, None, 0.0, 0.0, 0, 0, "", stream))  # fmt: skip
    read_arrays = optional(_C, "_read_arrays")
    if read_arrays is not None:
        row("pieces: _C._read_arrays(q) (one tensor conversion)", lambda: read_arrays(q))
        row("pieces: _C._read_arrays(5 tensors)", lambda: read_arrays(q, k, v, out, lse))
    row("pieces: 2 outputs, torch.empty", lambda: (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                                                   torch.empty((b, h, s), dtype=torch.float32, device=q.device)))
    if cuda:
        row("pieces: torch.cuda.current_stream().cuda_stream", lambda: torch.cuda.current_stream(q.device).cuda_stream)
    if optional(ops, "_options") is not None:
        row("pieces: _ops._options (option parsing)", lambda: ops._options(None, True, (-1, -1), 0.0, None, None))
    direct = optional(torch_ops, "_direct_call")
    if direct is not None:
        row("pieces: _torch_ops._direct_call (eager check)", lambda: direct(q, k, v, None, None, None))
    row("pieces: torch.no_grad() enter/exit", under_no_grad(lambda: None))

    # Decode, outermost first.
    b, keys, h, hk, d = shapes.decode
    step_q = torch.randn(b, 1, h, d, device=device, dtype=dtype)
    k_cache, v_cache = (torch.randn(b, keys, hk, d, device=device, dtype=dtype) for _ in range(2))
    lengths = torch.full((b,), keys, dtype=torch.int32, device=device)
    step_out, step_lse = torch.empty_like(step_q), torch.empty(b, h, 1, device=device, dtype=torch.float32)
    row("kvcache: flash_attn_with_kvcache", under_no_grad(lambda: flashattn.flash_attn_with_kvcache(
        step_q, k_cache, v_cache, cache_seqlens=lengths)))  # fmt: skip
    row("kvcache: flashattn.forward_kvcache (no op)", lambda: flashattn.forward_kvcache(
        step_q, k_cache, v_cache, cache_seqlens=lengths))  # fmt: skip
    row("kvcache: _C.fwd_kvcache, keywords", lambda: _C.fwd_kvcache(
        step_q, k_cache, v_cache, step_out, softmax_lse=step_lse, cache_seqlens=lengths, stream=stream))  # fmt: skip
    workspace = optional(__import__("flashattn._arrays", fromlist=["_"]), "workspace_allocator")
    if workspace is not None and cuda:
        row("pieces: _arrays.workspace_allocator (closure)", lambda: workspace(step_q))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=500, help="calls per measurement (default 500)")
    p.add_argument("--repeats", type=int, default=5, help="measurements per case; the lowest host time is kept")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="tensors' device (default cuda)")
    p.add_argument("--clock", choices=("wall", "process"), default="wall",
                   help="wall: time.perf_counter; process: this process's CPU time (time.process_time), which a "
                   "shared machine's other processes do not inflate; with --device cpu and OMP_NUM_THREADS=1 it "
                   "is the host cost itself")  # fmt: skip
    p.add_argument("--only", choices=("calls", "breakdown"), help="run one section only")
    p.add_argument("--out", help="JSON output path")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("host_cost.py: no CUDA device (--device cpu measures the host path on CPU tensors)")
    cases = []
    if args.only != "breakdown":
        cases += call_cases(torch, args.device)
    if args.only != "calls":
        cases += breakdown_cases(torch, args.device)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    rows = []
    print(f"{'case':20s} {'implementation':52s} {'host us':>9s} {'wall us':>9s}")
    for case, impl, fn in cases:
        host, wall = min(per_call_us(torch, fn, args.calls, args.device, clock) for _ in range(args.repeats))
        rows.append(dict(case=case, impl=impl, host_us=round(host, 2), wall_us=round(wall, 2)))
        print(f"{case:20s} {impl:52s} {host:9.2f} {wall:9.2f}", flush=True)
    if args.out:
        import flashattn

        name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        with open(args.out, "w") as f:
            meta = dict(device=name, torch=torch.__version__, flashattn=flashattn.__version__, calls=args.calls,
                        clock=args.clock, threads=torch.get_num_threads())
            json.dump(dict(meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
