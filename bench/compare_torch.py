"""flashattn (automatic backend choice) against PyTorch SDPA's flash, cuDNN and efficient backends, in one
process on one GPU, over FlashAttention's benchmark sweep: hidden 2048 (heads = 2048 / head_dim),
batch = 16384 / seqlen, seqlen 512..16k, head_dim 64/128/256, causal and not, forward and forward+backward,
bf16 and fp16.

Each implementation is first checked against a float64 reference on a slice (batch 0, head 0, the last
--check-rows queries: their output and, for fwd+bwd, dq), with flash-attn's criterion
    max|got - ref| <= 2 * max|naive_lowp - ref| + 4 * eps * max(1, max|ref|)
where naive_lowp is the same slice computed naively in the low precision. Then the implementations of one
configuration are timed in --rounds interleaved rounds (A B C A B C ..., the order rotated each round),
each a triton.testing.do_bench of --rep / --rounds ms (median of many runs, L2 flushed between runs; CUDA
events when triton is missing). A time is the median over rounds, and a ratio the median of the per-round
ratios, so that a ratio compares two implementations at the same moment of a shared machine. TFLOP/s:
forward 4 * B * H * S^2 * D (halved when causal); forward+backward 3.5x that, the backward alone 2.5x.

Prints one line per measurement, then a ratio table (flashattn / each peer); writes JSON to --out and PNG
plots (TFLOP/s against seqlen, one panel per (head_dim, causal, mode)) to --plot-dir.

    python bench/compare_torch.py --out bench/results/compare_torch.json --plot-dir bench/results
    python bench/compare_torch.py --dims 128 --seqlens 1024,4096 --modes fwd --dtypes bf16   # a subset

--paged: flashattn against itself instead, paged K/V in the varlen forward (vLLM's prefill call), forward
only, each dtype of --dtypes (bf16 by default then):
  prefill: --tokens tokens in sequences of each --seqlens length (default 1k-4k), every head dim of --dims
    (default 64,128), causal and not: flash_attn_varlen_func on contiguous K/V, and on the same keys paged
    at each --page-sizes size (default 16,256; blocks in shuffled order) with block_table.
  chunked: one call over a batch mixing --decodes 1-token sequences (context --decode-context keys) with
    two 2048-token prefill chunks (contexts 2048 and 4096), paged, seqused_k, causal, against the same work
    as two calls: flash_attn_varlen_func for the chunks and flash_attn_with_kvcache for the decodes.
  Outputs are compared with the contiguous (prefill) and split (chunked) outputs; the table gives each
  variant's time over its baseline's (median of per-round ratios).

    python bench/compare_torch.py --paged --out bench/results/paged_varlen.json
"""

import argparse
import datetime
import itertools
import json
import math
import os
import subprocess
import sys

# Not run unless asked: flashattn_sm80, flashattn forced onto cuda_sm80 both ways (the peer of a new kernel
# generation that "flashattn" picks; scripts/gpu-check.sh --only sm90), flashattn_det, flashattn's
# default choice with deterministic=True (the backward's bitwise-repeatable mode), and flashattn_sm90 /
# flashattn_sm90_det, forced onto cuda_sm90 (its calls the dispatcher defers to cuda_sm80, timed anyway).
IMPLEMENTATIONS = ("flashattn", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flashattn_sm80", "flashattn_det",
                   "flashattn_sm90", "flashattn_sm90_det")
DEFAULT_IMPLS = IMPLEMENTATIONS[:4]
PEERS = IMPLEMENTATIONS[1:]
DTYPES = ("bf16", "fp16")
MODES = ("fwd", "fwdbwd", "bwd")
DEFAULT_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
DEFAULT_DIMS = (64, 128, 256)
HIDDEN = 2048
TOKENS = 16384


def _int_list(text):
    return tuple(int(x) for x in text.split(",") if x)


def _choice_list(choices):
    def parse(text):
        values = tuple(x for x in text.split(",") if x)
        unknown = [x for x in values if x not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(choices)}")
        return values

    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dims", type=_int_list, default=DEFAULT_DIMS, help="head dims (default 64,128,256)")
    p.add_argument("--seqlens", type=_int_list, default=DEFAULT_SEQLENS, help="sequence lengths (default 512..16384)")
    p.add_argument("--causal", choices=("both", "true", "false"), default="both", help="masks to run (default both)")
    p.add_argument("--modes", type=_choice_list(MODES), default=("fwd", "fwdbwd"),
                   help="fwd, fwdbwd and/or bwd (the backward alone) (default fwd,fwdbwd)")
    p.add_argument("--dtypes", type=_choice_list(DTYPES), default=DTYPES, help="bf16 and/or fp16 (default both)")
    p.add_argument("--impls", type=_choice_list(IMPLEMENTATIONS), default=DEFAULT_IMPLS,
                   help="implementations to run (default the first four: flashattn and the SDPA backends)")
    p.add_argument("--rep", type=int, default=100, help="timed ms per implementation and configuration, split "
                   "over the rounds (default 100)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per configuration (default 5)")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up time in ms, first round (default 25)")
    p.add_argument("--check-rows", type=int, default=128, help="query rows checked against fp64 (0: no check)")
    p.add_argument("--out", default="compare_torch.json", help="JSON output path")
    p.add_argument("--plot-dir", default=None, help="folder for PNG plots (default: beside --out)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--paged", action="store_true", help="paged varlen prefill and chunked prefill (see above)")
    p.add_argument("--page-sizes", type=_int_list, default=(16, 256), help="--paged: page sizes (default 16,256)")
    p.add_argument("--tokens", type=int, default=TOKENS, help=f"--paged: prefill tokens per call (default {TOKENS})")
    p.add_argument("--decodes", type=int, default=32, help="--paged: 1-token sequences of the chunked batch")
    p.add_argument("--decode-context", type=int, default=4096, help="--paged: keys of each decode sequence")
    args = p.parse_args(argv)
    if args.paged:
        defaults = {"dims": ((64, 128), DEFAULT_DIMS), "seqlens": ((1024, 2048, 4096), DEFAULT_SEQLENS),
                    "dtypes": (("bf16",), DTYPES)}
        for name, (paged_default, default) in defaults.items():
            if getattr(args, name) == default:
                setattr(args, name, paged_default)
    return args


# ------------------------------------------------------------------------------------------ problem


def problems(args):
    causal_values = {"both": (False, True), "true": (True,), "false": (False,)}[args.causal]
    for dtype in args.dtypes:
        for dim in args.dims:
            for causal in causal_values:
                for seqlen in args.seqlens:
                    yield dict(dtype=dtype, dim=dim, causal=causal, seqlen=seqlen, batch=max(1, TOKENS // seqlen),
                               heads=HIDDEN // dim)


def flops(problem, mode):
    b, h, s, d = problem["batch"], problem["heads"], problem["seqlen"], problem["dim"]
    forward = 4.0 * b * h * s * s * d / (2.0 if problem["causal"] else 1.0)
    return forward * {"fwd": 1.0, "fwdbwd": 3.5, "bwd": 2.5}[mode]


class Inputs:
    """q, k, v and dout in both layouts: (B, S, H, D) for flashattn, (B, H, S, D) for SDPA (each gets its
    native layout, contiguous), with the same values."""

    def __init__(self, torch, problem):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[problem["dtype"]]
        shape = (problem["batch"], problem["seqlen"], problem["heads"], problem["dim"])
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.bshd = [torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(4)]
        self.bhsd = [x.transpose(1, 2).contiguous() for x in self.bshd]
        self.dtype = dtype

    def leaves(self, layout):
        return [x.detach().requires_grad_() for x in (self.bshd if layout == "bshd" else self.bhsd)[:3]]

    def dout(self, layout):
        return (self.bshd if layout == "bshd" else self.bhsd)[3]


# ------------------------------------------------------------------------------------ implementations


def make_forward(torch, name):
    """fn(q, k, v, causal) -> out in the implementation's layout, and that layout."""
    if name == "flashattn":
        import flashattn

        return (lambda q, k, v, causal: flashattn.flash_attn_func(q, k, v, causal=causal)), "bshd"
    if name in ("flashattn_sm80", "flashattn_sm90", "flashattn_sm90_det"):
        return _forced_backend_attention(torch, "cuda_" + name.split("_")[1], name.endswith("_det")), "bshd"
    if name == "flashattn_det":
        import flashattn

        return (lambda q, k, v, causal: flashattn.flash_attn_func(q, k, v, causal=causal, deterministic=True)), "bshd"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[name]

    def forward(q, k, v, causal):
        with sdpa_kernel([backend]):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

    return forward, "bhsd"


def _forced_backend_attention(torch, backend, deterministic=False):
    """fn(q, k, v, causal) -> out with forward and backward forced onto `backend` (flashattn.forward and
    flashattn.backward under autograd), to time one backend of ours beside the default choice."""
    import flashattn

    class Forced(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            out, lse, _ = flashattn.forward(q, k, v, causal=causal, backend=backend)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal = causal
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = flashattn.backward(dout, q, k, v, out, lse, causal=ctx.causal, backend=backend,
                                            deterministic=deterministic)
            return dq, dk, dv, None

    return lambda q, k, v, causal: Forced.apply(q, k, v, causal)


def step(torch, forward, layout, inputs, causal, mode):
    """The function to time: forward only (no autograd graph), forward then backward, or the backward alone
    (of one forward run here, its graph kept between runs)."""
    q, k, v = inputs.leaves(layout)
    dout = inputs.dout(layout)
    if mode == "fwd":
        def run():
            with torch.no_grad():
                forward(q, k, v, causal)
    elif mode == "bwd":
        out = forward(q, k, v, causal)

        def run():
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    else:
        def run():
            out = forward(q, k, v, causal)
            torch.autograd.grad(out, (q, k, v), dout)
    return run


def time_ms(torch, fn, warmup, rep):
    """Median milliseconds of fn: triton's do_bench (flushes L2 between runs) or, without triton, CUDA events."""
    try:
        import triton.testing
    except ImportError:
        return _time_with_events(torch, fn, rep)
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def _time_with_events(torch, fn, rep):
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")  # larger than any L2
    fn()
    times = []
    for _ in range(max(10, rep // 5)):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def time_interleaved(torch, runs, args):
    """{name: [ms of each round]} for the functions in `runs` ({name: fn}), timed in args.rounds rounds that
    each time every function once, starting one name later each round. The first round also warms up."""
    names = list(runs)
    rounds = max(1, args.rounds)
    rep = max(1, args.rep // rounds)
    times = {name: [] for name in names}
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            times[name].append(time_ms(torch, runs[name], args.warmup if r == 0 else 1, rep))
    return times


def paired_ratio(ours, theirs):
    """Median over rounds of theirs[r] / ours[r]: how many times faster ours is, round by round."""
    return median([t / o for o, t in zip(ours, theirs)])


# ----------------------------------------------------------------------------------------- checking


def slice_reference(torch, q, k, v, dout, causal, rows, dtype=None):
    """Output and dq of the last `rows` queries of (batch 0, head 0), from (S, D) tensors: in float64
    (dtype None) or naively in `dtype` (the low-precision baseline)."""
    dt = torch.float64 if dtype is None else dtype
    q, k, v, dout = (x.to(dt) for x in (q, k, v, dout))
    seqlen, dim = q.shape
    first = seqlen - rows
    scale = dim**-0.5
    scores = (q[first:] @ k.T) * scale
    if causal:
        i = torch.arange(first, seqlen, device=q.device)[:, None]
        j = torch.arange(seqlen, device=q.device)[None, :]
        scores = scores.masked_fill(j > i, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = p @ v
    dp = dout[first:] @ v.T
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = (ds @ k) * scale
    return out.double(), dq.double()


def check(torch, name, forward, layout, inputs, problem, mode, rows):
    """Runs the implementation once on the full problem and checks its slice; returns a dict."""
    rows = min(rows, problem["seqlen"])
    q, k, v = inputs.leaves(layout)
    dout = inputs.dout(layout)
    out = forward(q, k, v, problem["causal"])
    dq = torch.autograd.grad(out, q, dout)[0] if mode != "fwd" else None

    def head0(x):  # (S, D) of batch 0, head 0
        return x[0, :, 0] if layout == "bshd" else x[0, 0]

    sq, sk, sv, sdout = (head0(x).detach() for x in (q, k, v, dout))
    ref_out, ref_dq = slice_reference(torch, sq, sk, sv, sdout, problem["causal"], rows)
    naive_out, naive_dq = slice_reference(torch, sq, sk, sv, sdout, problem["causal"], rows, inputs.dtype)
    scale_eps = 4.0 * torch.finfo(inputs.dtype).eps
    result = {}
    pairs = [("out", head0(out)[-rows:].double(), ref_out, naive_out)]
    if dq is not None:
        pairs.append(("dq", head0(dq)[-rows:].double(), ref_dq, naive_dq))
    ok = True
    for label, got, ref, naive in pairs:
        err = (got - ref).abs().max().item()
        naive_err = (naive - ref).abs().max().item()
        bound = 2.0 * naive_err + scale_eps * max(1.0, ref.abs().max().item())
        result[f"{label}_err"] = err
        result[f"{label}_bound"] = bound
        ok = ok and math.isfinite(err) and err <= bound
    result["ok"] = ok
    return result


# ------------------------------------------------------------------------------------------- report


def chosen_backend(torch, problem, inputs, mode):
    import flashattn

    q, k, v = inputs.bshd[:3]
    direction = "forward" if mode == "fwd" else "backward"
    answers = flashattn.query_backends(q, k, v, direction=direction, causal=problem["causal"])
    return next((a["name"] for a in answers if a["chosen"]), None)


def config_key(row):
    return (row["dtype"], row["dim"], row["causal"], row["mode"], row["seqlen"])


def ratio_table(rows, impls):
    """Lines of the final table: flashattn's TFLOP/s and its ratio to each peer's, per configuration."""
    peers = [p for p in PEERS if p in impls]
    head = f"{'dtype':5} {'D':>4} {'mask':6} {'mode':6} {'S':>6} {'flashattn':>10} " + " ".join(
        f"{'x ' + p.removeprefix('sdpa_'):>12}" for p in peers)
    lines = [head]
    by_config = {}
    for r in rows:
        by_config.setdefault(config_key(r), {})[r["impl"]] = r
    for key in sorted(by_config):
        entries = by_config[key]
        ours = entries.get("flashattn", {}).get("tflops")
        cells = []
        for p in peers:
            ratio = entries.get("flashattn", {}).get("x_" + p)
            cells.append(f"{ratio:12.2f}" if ratio else f"{'-':>12}")
        dtype, dim, causal, mode, seqlen = key
        ours_text = f"{ours:10.1f}" if ours else f"{'-':>10}"
        lines.append(f"{dtype:5} {dim:4d} {'causal' if causal else 'full':6} {mode:6} {seqlen:6d} {ours_text} "
                     + " ".join(cells))
    return lines


def plot(rows, impls, plot_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(plot_dir, exist_ok=True)
    paths = []
    for dtype in sorted({r["dtype"] for r in rows}):
        subset = [r for r in rows if r["dtype"] == dtype]
        dims = sorted({r["dim"] for r in subset})
        columns = sorted({(r["causal"], r["mode"]) for r in subset})
        fig, axes = plt.subplots(len(dims), len(columns), figsize=(4.2 * len(columns), 3.2 * len(dims)),
                                 squeeze=False)
        for i, dim in enumerate(dims):
            for j, (causal, mode) in enumerate(columns):
                ax = axes[i][j]
                for impl in impls:
                    points = sorted((r["seqlen"], r["tflops"]) for r in subset
                                    if r["impl"] == impl and r["dim"] == dim and r["causal"] == causal
                                    and r["mode"] == mode and r.get("tflops"))
                    if points:
                        ax.plot(*zip(*points), marker="o", label=impl)
                ax.set_xscale("log", base=2)
                ax.set_title(f"D={dim} {'causal' if causal else 'full'} {mode}", fontsize=10)
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.grid(True, alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"flashattn vs PyTorch SDPA ({dtype}; hidden {HIDDEN}, {TOKENS} tokens)")
        fig.tight_layout()
        path = os.path.join(plot_dir, f"compare_torch_{dtype}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# ------------------------------------------------------------------------------------------- --paged


def paged_cache(torch, keys, lengths, page_size, gen):
    """keys (total, Hk, D) of sequences of `lengths`, rows packed in order, as a paged cache (num_blocks,
    page_size, Hk, D) with the blocks in shuffled order and a spare one; returns (cache, block_table)."""
    pages = [-(-n // page_size) for n in lengths]
    num_blocks = sum(pages) + 1
    order = torch.randperm(num_blocks, generator=gen, device="cpu")
    cache = torch.zeros((num_blocks, page_size) + tuple(keys.shape[1:]), dtype=keys.dtype, device=keys.device)
    table = torch.zeros((len(lengths), max(pages)), dtype=torch.int32)
    start, used = 0, 0
    for b, n in enumerate(lengths):
        for i in range(pages[b]):
            block = int(order[used])
            used += 1
            rows = min(page_size, n - i * page_size)
            cache[block, :rows] = keys[start + i * page_size : start + i * page_size + rows]
            table[b, i] = block
        start += n
    return cache, table.to(keys.device)


def cumulative(torch, lengths):
    return torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")


def paged_prefill_runs(torch, fa, dtype, dim, seqlen, causal, args):
    """{name: fn} of one prefill configuration (contiguous first) and their outputs."""
    heads, batch = HIDDEN // dim, max(1, args.tokens // seqlen)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((batch * seqlen, heads, dim), device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    cu = cumulative(torch, [seqlen] * batch)
    runs = {"contiguous": lambda: fa.flash_attn_varlen_func(q, k, v, cu, cu, seqlen, seqlen, causal=causal)}
    for page in args.page_sizes:
        cpu_gen = torch.Generator().manual_seed(page)
        k_cache, table = paged_cache(torch, k, [seqlen] * batch, page, cpu_gen)
        v_cache, _ = paged_cache(torch, v, [seqlen] * batch, page, torch.Generator().manual_seed(page))
        runs[f"page{page}"] = (lambda kc=k_cache, vc=v_cache, t=table: fa.flash_attn_varlen_func(
            q, kc, vc, cu, cu, seqlen, seqlen, causal=causal, block_table=t))
    flop = 4.0 * batch * heads * seqlen * seqlen * dim / (2.0 if causal else 1.0)
    return runs, flop


def chunked_prefill_runs(torch, fa, dtype, dim, page, args):
    """{name: fn} of the chunked-prefill batch: one paged varlen call ("split" first: a varlen call for the
    chunks plus a kvcache call for the decodes, on the same cache)."""
    heads = HIDDEN // dim
    chunks_q, chunks_k = [2048, 2048], [2048, 4096]
    dec_k = [args.decode_context] * args.decodes
    lengths_q, lengths_k = chunks_q + [1] * args.decodes, chunks_k + dec_k
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn((sum(lengths_q), heads, dim), device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn((sum(lengths_k), heads, dim), device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    k_cache, table = paged_cache(torch, k, lengths_k, page, torch.Generator().manual_seed(page))
    v_cache, _ = paged_cache(torch, v, lengths_k, page, torch.Generator().manual_seed(page))
    cu_q, cu_k = cumulative(torch, lengths_q), cumulative(torch, lengths_k)
    used = torch.tensor(lengths_k, dtype=torch.int32, device="cuda")
    n_chunk = sum(chunks_q)
    cu_q_chunks, cu_k_chunks = cumulative(torch, chunks_q), cumulative(torch, chunks_k)
    q_dec = q[n_chunk:].unsqueeze(1)  # (decodes, 1, heads, dim)
    seqlens_dec = torch.tensor(dec_k, dtype=torch.int32, device="cuda")

    def split():
        a = fa.flash_attn_varlen_func(q[:n_chunk], k_cache, v_cache, cu_q_chunks, cu_k_chunks, max(chunks_q),
                                      max(chunks_k), causal=True, block_table=table[: len(chunks_q)])
        b = fa.flash_attn_with_kvcache(q_dec, k_cache, v_cache, cache_seqlens=seqlens_dec,
                                       block_table=table[len(chunks_q):], causal=True)
        return torch.cat([a, b.squeeze(1)])

    def mixed():
        return fa.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, max(lengths_q), max(lengths_k),
                                         causal=True, block_table=table, seqused_k=used)

    flop = sum(4.0 * heads * dim * (sq * sk - sq * (sq - 1) / 2) for sq, sk in zip(lengths_q, lengths_k))
    return {"split": split, "mixed": mixed}, flop


def run_paged(torch, fa, args, meta):
    """The --paged benchmark: rows like the sweep's, `baseline` naming what each row's ratio divides by."""
    groups = []
    for dtype_name in args.dtypes:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
        for dim in args.dims:
            for causal in (False, True):
                for seqlen in args.seqlens:
                    key = dict(kind="prefill", dtype=dtype_name, dim=dim, causal=causal, seqlen=seqlen)
                    groups.append((key, lambda d=dtype, dm=dim, c=causal, s=seqlen:
                                   paged_prefill_runs(torch, fa, d, dm, s, c, args)))
            for page in args.page_sizes:
                key = dict(kind="chunked", dtype=dtype_name, dim=dim, causal=True, page=page, decodes=args.decodes,
                           decode_context=args.decode_context)
                groups.append((key, lambda d=dtype, dm=dim, pg=page: chunked_prefill_runs(torch, fa, d, dm, pg, args)))
    rows, lines = [], []
    for key, build in groups:
        runs, flop = build()
        outputs = {name: fn() for name, fn in runs.items()}
        baseline = next(iter(runs))
        times = time_interleaved(torch, runs, args)
        for name, round_ms in times.items():
            diff = (outputs[name].double() - outputs[baseline].double()).abs().max().item()
            row = dict(key, impl=name, baseline=baseline, round_ms=round_ms, ms=median(round_ms),
                       tflops=flop / median(round_ms) / 1e9, max_diff=diff, ok=math.isfinite(diff) and diff < 1e-2)
            if name != baseline:
                row["time_vs_baseline"] = paired_ratio(times[baseline], round_ms)  # median of variant / baseline
            rows.append(row)
            print(json.dumps(row), flush=True)
            where = f"S {key['seqlen']:5d} {'causal' if key['causal'] else 'full':6}" if key["kind"] == "prefill" else \
                f"page {key['page']:3d} {key['decodes']} x 1 + 2 x 2048"
            ratio = f"{row['time_vs_baseline']:6.3f}" if "time_vs_baseline" in row else f"{'-':>6}"
            lines.append(f"{key['kind']:8} {key['dtype']:5} D {key['dim']:3d} {where:24} {name:10} "
                         f"{row['ms']:8.3f} ms {row['tflops']:6.1f} TFLOP/s  x{ratio} of {baseline}")
        del runs, outputs
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(dict(meta, rows=rows), f, indent=1)
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print(f"CHECK FAILED: {r['kind']} {r['impl']} max_diff={r['max_diff']} vs {r['baseline']}")
    print(f"\n== paged varlen: time of each variant over its baseline's ({meta['device']}) ==")
    print("\n".join(lines))
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------- main


def main(argv=None):
    args = parse_args(argv)
    import torch

    import flashattn

    if not torch.cuda.is_available():
        sys.exit("compare_torch.py needs a CUDA device")
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
                flashattn=flashattn.__version__, backends=[b["name"] for b in flashattn.list_backends()],
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                commit=git_commit(), command=" ".join([os.path.basename(__file__), *(argv or sys.argv[1:])]))
    print(json.dumps(meta), flush=True)
    if args.paged:
        return run_paged(torch, flashattn, args, meta)
    forwards = {name: make_forward(torch, name) for name in args.impls}
    rows = []
    for problem in problems(args):
        inputs = Inputs(torch, problem)
        for mode in args.modes:
            mode_rows, runs = {}, {}
            for name, (forward, layout) in forwards.items():
                row = mode_rows[name] = dict(problem, mode=mode, impl=name)
                try:
                    if name == "flashattn":
                        row["backend"] = chosen_backend(torch, problem, inputs, mode)
                    if args.check_rows > 0:
                        row.update(check(torch, name, forward, layout, inputs, problem, mode, args.check_rows))
                    run = step(torch, forward, layout, inputs, problem["causal"], mode)
                    run()  # a peer may not support a shape (cuDNN and D=256 backward, say): it raises here
                    runs[name] = run
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            for name, round_ms in time_interleaved(torch, runs, args).items():
                row = mode_rows[name]
                row["round_ms"] = round_ms
                row["ms"] = median(round_ms)
                row["tflops"] = flops(problem, mode) / row["ms"] / 1e9
            ours = mode_rows.get("flashattn", {}).get("round_ms")
            for name, row in mode_rows.items():
                if ours and name != "flashattn" and row.get("round_ms"):
                    mode_rows["flashattn"]["x_" + name] = paired_ratio(ours, row["round_ms"])
            for row in mode_rows.values():
                rows.append(row)
                print(json.dumps(row), flush=True)
        del inputs
        torch.cuda.empty_cache()

    with open(args.out, "w") as f:
        json.dump(dict(meta, rows=rows), f, indent=1)
    if not args.no_plots:
        for path in plot(rows, args.impls, args.plot_dir or os.path.dirname(os.path.abspath(args.out))):
            print(f"plot: {path}")
    failed = [r for r in rows if r.get("ok") is False]
    for r in failed:
        print(f"CHECK FAILED: {r['impl']} {config_key(r)} out_err={r.get('out_err')} dq_err={r.get('dq_err')}")
    print(f"\n== TFLOP/s of flashattn and its ratio to each PyTorch SDPA backend ({meta['device']}) ==")
    print("\n".join(ratio_table(rows, args.impls)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
