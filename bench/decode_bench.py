"""Decode benchmark: flashattn.flash_attn_with_kvcache (cuda_decode) against PyTorch SDPA (cuDNN, flash).

Measures, per configuration (head dim, query/kv heads, batch, context, query tokens, page size), the
median time of each implementation on the same K/V data and reports the K+V bytes read per second, the
fraction of a read-only ceiling measured in the same process (the larger of a torch.sum reduction and a
custom 16-byte-load read kernel through cupy, when cupy is present), and the ratios against cuDNN and
flash. With cupy it also times, per configuration, a read-only kernel over the same K and V (the floor of
any kernel reading those bytes, launch included: it matters at batch 1 where the bytes take a few us),
and on sm_90+ a bulk-copy probe of the same bytes (cp.async.bulk into a ring of shared-memory stages per
SM, two ring sizes; the faster is reported: the floor a TMA-fed decode kernel would have);
and a one-element fill gives the launch-and-event floor of the method. L2 is flushed before every timed
call. Peers run non-causal on the contiguous cache (SDPA's is_causal is top-left aligned, not the
bottom-right of decoding); cuda_decode runs non-causal too unless --causal. Paged configurations time
cuda_decode on a shuffled page table holding the same keys as the contiguous cache; the peers' figures
are those of the contiguous layout.

Prints a table and writes JSON (--out). The default subset (30 configurations) takes 1-3 minutes on an
H200; --full (~1700 configurations, far longer) and the list flags select more. Importable and
--help-able without a GPU or torch.

    python bench/decode_bench.py                       # default subset
    python bench/decode_bench.py --full --out decode.json
    python bench/decode_bench.py --dims 128 --batches 1 16 --contexts 4096 --sq 1 8 --pages 0 16
    python bench/decode_bench.py --ragged --batches 16 64 --contexts 4096 32768 --pages 0 16
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

GIB = 1 << 30

# The default subset: (head_dim, heads, heads_k, batch, context, seqlen_q, page_size); page 0 = contiguous.
DEFAULT_CONFIGS = (
    [(128, 32, 8, b, s, 1, 0) for b in (1, 16, 64) for s in (4096, 32768)]
    + [(128, 32, 8, b, s, 1, 16) for b in (1, 16, 64) for s in (4096, 32768)]
    + [(128, 32, 8, 16, 4096, 1, p) for p in (1, 256)]
    + [(128, 32, 8, b, s, q, 0) for b in (1, 16) for s in (4096, 32768) for q in (8, 16)]
    + [(128, 64, 8, b, 4096, q, 16) for b in (1, 16) for q in (1, 8)]
    + [(d, 32 if d == 64 else 16, 8, 16, 8192, 1, 0) for d in (64, 256)]
    + [(128, 32, 8, 128, 8192, 1, 16), (128, 32, 8, 4, 131072, 1, 16)]
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--full", action="store_true",
                   help="the whole grid: dims 64/128/256, GQA 32/8 and 64/8, batch 1..128, context 1k..128k, "
                        "Sq 1/8/16, pages 1/16/256/contiguous (skips configurations above --max-kv-gib)")
    p.add_argument("--dims", type=int, nargs="+", help="head dims (a grid with the other list flags)")
    p.add_argument("--ratios", nargs="+", default=None, help="query/kv heads, e.g. 32/8 64/8")
    p.add_argument("--batches", type=int, nargs="+")
    p.add_argument("--contexts", type=int, nargs="+")
    p.add_argument("--sq", type=int, nargs="+", help="query tokens per call")
    p.add_argument("--pages", type=int, nargs="+", help="page sizes; 0 = contiguous cache")
    p.add_argument("--causal", action="store_true", help="run cuda_decode causal (bottom-right) for Sq > 1")
    p.add_argument("--splits", type=int, default=0,
                   help="num_splits passed to cuda_decode (0: its heuristic); to tune the heuristic")
    p.add_argument("--append", action="store_true",
                   help="every cuda_decode call also appends its Sq tokens' keys and values (k/v new, at positions "
                        "context - Sq .., cache_seqlens = context - Sq), as a serving step does; the new rows equal "
                        "the cache's last rows, so the cache and the output check stay the same (peers do not append)")
    p.add_argument("--ragged", action="store_true",
                   help="per-sequence cache lengths ramping over the batch: sequence i attends "
                        "ceil(context * (i + 1) / batch) keys (a continuous-batching mix); bandwidth and the floor "
                        "count the attended bytes; the peers, which take no per-sequence lengths, run padded to the "
                        "full context")
    p.add_argument("--no-peers", action="store_true", help="time only cuda_decode")
    p.add_argument("--fp8", action="store_true",
                   help="also time cuda_decode on an FP8 (e4m3) copy of the cache with per-(batch, kv head) "
                        "descales: fp8_us, its bandwidth over the bytes it reads (half), and bf16 time / FP8 time")
    p.add_argument("--graph", action="store_true",
                   help="time every implementation as the replay of a CUDA graph of one call: the kernels "
                        "without the host path of a Python call (how serving engines run decode)")
    p.add_argument("--rep-ms", type=float, default=100.0, help="timing budget per implementation and config")
    p.add_argument("--max-kv-gib", type=float, default=24.0, help="skip configurations with more K+V bytes")
    p.add_argument("--out", default=None, help="JSON path (default: $OUT/decode_bench.json or ./decode_bench.json)")
    return p.parse_args(argv)


def selected_configs(a):
    grid_flags = (a.dims, a.ratios, a.batches, a.contexts, a.sq, a.pages)
    if not a.full and all(f is None for f in grid_flags):
        return list(DEFAULT_CONFIGS)
    dims = a.dims or ([64, 128, 256] if a.full else [128])
    ratios = [tuple(int(x) for x in r.split("/")) for r in (a.ratios or (["32/8", "64/8"] if a.full else ["32/8"]))]
    batches = a.batches or ([1, 4, 16, 64, 128] if a.full else [1, 16])
    contexts = a.contexts or ([1024, 4096, 16384, 32768, 131072] if a.full else [4096, 32768])
    sqs = a.sq or ([1, 8, 16] if a.full else [1])
    pages = a.pages if a.pages is not None else ([0, 1, 16, 256] if a.full else [0, 16])
    return [(d, h, hk, b, s, q, pg) for d in dims for (h, hk) in ratios for b in batches for s in contexts
            for q in sqs for pg in pages if pg == 0 or s % pg == 0]


def kv_bytes(cfg):
    d, _, hk, b, s, _, _ = cfg
    return 2 * b * s * hk * d * 2


def ragged_lengths(batch, context):
    """The --ragged cache lengths: a ramp from context / batch to context (the last sequence is full)."""
    return [-(-context * (i + 1) // batch) for i in range(batch)]


# ---------------------------------------------------------------------------------------------- timing

class Timer:
    """Median GPU time of fn() in ms, L2 flushed (a 256 MB write) before each call, CUDA events."""

    def __init__(self, torch):
        self.torch = torch
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, rep_ms):
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        one = max(time.perf_counter() - t0, 1e-6) * 1e3
        n = int(min(200, max(5, rep_ms / max(one, 0.05))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        return times[len(times) // 2]


READ_KERNEL = r"""
extern "C" __global__ void read_bytes(const uint4* __restrict__ p, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {  // four independent 16-byte loads in flight per thread
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) { const uint4 a = p[i]; acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive
}
"""


def read_ceilings(torch, timer):
    """Read-only bandwidth (TB/s) of a torch reduction and, with cupy, of a custom read kernel."""
    out = {}
    x = torch.randn(2 * GIB // 2, dtype=torch.bfloat16, device="cuda")
    nbytes = x.numel() * 2
    ms = timer(lambda: x.sum(), 200)
    out["torch_sum_tbps"] = nbytes / ms / 1e9
    try:
        import cupy

        kernel = cupy.RawKernel(READ_KERNEL, "read_bytes")
        sink = cupy.zeros(1, dtype=cupy.uint32)
        n16 = nbytes // 16
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        xc = cupy.asarray(x.view(torch.int16))  # the same memory (cupy has no bfloat16)

        def run():
            with stream:
                kernel((sms * 8,), (512,), (xc, cupy.uint64(n16), sink))

        ms = timer(run, 200)
        out["read_kernel_tbps"] = nbytes / ms / 1e9
    except Exception as e:  # no cupy, or no compiler for it: the torch figure alone
        out["read_kernel_error"] = repr(e)[:200]
    del x
    torch.cuda.empty_cache()
    out["ceiling_tbps"] = max(v for k, v in out.items() if k.endswith("_tbps"))
    return out


READ2_KERNEL = r"""
extern "C" __global__ void read_two(const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned long long n,
                                    unsigned* sink) {
  unsigned acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint4 x = a[i], y = b[i];  // two independent 16-byte loads in flight per step
    acc ^= x.x ^ x.y ^ x.z ^ x.w ^ y.x ^ y.y ^ y.z ^ y.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive
}
"""


# The bulk-copy read probe (issue 34): the same bytes as read_two, streamed into shared memory by the copy
# engine (cp.async.bulk, sm_90+) through a ring of STAGES stages of CHUNK bytes per SM, one driving thread
# per block and one block per SM: bytes in flight without registers, as a TMA-fed decode kernel would have
# them. Compiled with -DSTAGES=.. -DCHUNK=.. (BULK_SHAPES).
BULK_KERNEL = r"""
extern "C" __global__ void read_two_bulk(const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
                                         unsigned long long bytes, unsigned* sink) {
  // One block of one warp per SM; lane 0 drives a ring of kStages shared-memory stages filled by bulk copies
  // (cp.async.bulk, completion counted on one mbarrier per stage). Chunk c of the 2 * chunks chunks (a's, then
  // b's) goes to block c % gridDim.x; a stage is refilled as soon as its copy has landed and been read.
  constexpr int kStages = STAGES;
  constexpr unsigned kChunk = CHUNK;
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) unsigned long long full[kStages];
  if (threadIdx.x != 0) return;
  const unsigned long long chunks = (bytes + kChunk - 1) / kChunk;
  const unsigned long long total = 2 * chunks;
  unsigned acc = 0;
  unsigned bar0 = (unsigned)__cvta_generic_to_shared(&full[0]);
  unsigned buf0 = (unsigned)__cvta_generic_to_shared(buf);
  for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * s));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto issue = [&](unsigned long long c, int s) {
    const unsigned char* src = c < chunks ? a + c * kChunk : b + (c - chunks) * kChunk;
    const unsigned long long first = (c < chunks ? c : c - chunks) * kChunk;
    const unsigned size = (unsigned)(bytes - first < kChunk ? bytes - first : kChunk);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar0 + 8 * s), "r"(size) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     buf0 + s * kChunk),
                 "l"(src), "r"(size), "r"(bar0 + 8 * s)
                 : "memory");
  };
  unsigned long long c = blockIdx.x;
  for (int s = 0; s < kStages && c + (unsigned long long)s * gridDim.x < total; ++s) issue(c + (unsigned long long)s * gridDim.x, s);
  unsigned phase = 0;
  int s = 0;
  for (; c < total; c += gridDim.x) {
    unsigned done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(bar0 + 8 * s), "r"(phase)
          : "memory");
    acc ^= *reinterpret_cast<const unsigned*>(buf + s * kChunk);  // the stage is read
    const unsigned long long next = c + (unsigned long long)kStages * gridDim.x;
    // The stage was read through the generic proxy; the next copy writes it through the async one.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (next < total) issue(next, s);
    if (++s == kStages) {
      s = 0;
      phase ^= 1;
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the copies alive
}
"""
BULK_SHAPES = ((4, 8192), (6, 16384))  # (stages, bytes per stage): 32 KB and 96 KB in flight per SM


class ReadFloor:
    """Per configuration, the time of a read-only kernel over the configuration's own K and V (the same
    bytes, L2 flushed, graph or not as the implementations): what any decode kernel of that size costs at
    least, launch included. Needs cupy; without it the floor columns stay empty (read_ceilings records
    why)."""

    def __init__(self, torch):
        self.torch = torch
        self.kernel = None
        try:
            import cupy

            self.cupy = cupy
            self.kernel = cupy.RawKernel(READ2_KERNEL, "read_two")
            self.sink = cupy.zeros(1, dtype=cupy.uint32)
            self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        except Exception:
            self.kernel = None
        self.bulk = {}  # (stages, chunk) -> kernel, on sm_90+
        self.bulk_error = None
        if self.kernel is not None and torch.cuda.get_device_capability(0) >= (9, 0):
            for stages, chunk in BULK_SHAPES:
                try:
                    k = self.cupy.RawKernel(BULK_KERNEL, "read_two_bulk",
                                            options=(f"-DSTAGES={stages}", f"-DCHUNK={chunk}"))
                    k.max_dynamic_shared_size_bytes = stages * chunk
                    self.bulk[(stages, chunk)] = k
                except Exception as e:
                    self.bulk_error = repr(e)[:200]

    def read_fn(self, k, v, elems=None):
        """Reads the first `elems` elements (default all) of each of k and v."""
        torch, cupy = self.torch, self.cupy
        elems = k.numel() if elems is None else elems
        kc = cupy.asarray(k.reshape(-1)[:elems].view(torch.int16))  # the same memory (cupy has no bfloat16)
        vc = cupy.asarray(v.reshape(-1)[:elems].view(torch.int16))
        n16 = cupy.uint64(elems * 2 // 16)

        def run():
            # The stream current at call time: the graph capture runs on its own stream.
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                self.kernel((self.sms * 8,), (512,), (kc, vc, n16, self.sink))

        return run

    def bulk_fn(self, shape, k, v, elems=None):
        """The bulk-copy probe of `shape` (stages, chunk) over the first `elems` elements of k and v."""
        torch, cupy = self.torch, self.cupy
        elems = k.numel() if elems is None else elems
        kc = cupy.asarray(k.reshape(-1)[:elems].view(torch.int16))
        vc = cupy.asarray(v.reshape(-1)[:elems].view(torch.int16))
        nbytes = cupy.uint64(elems * 2)
        kernel, smem = self.bulk[shape], shape[0] * shape[1]

        def run():
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                kernel((self.sms,), (32,), (kc, vc, nbytes, self.sink), shared_mem=smem)

        return run


def graphed(torch, fn):
    """fn captured in a CUDA graph (after warm-up calls on a side stream, as torch requires); returns
    the graph's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


# ------------------------------------------------------------------------------------------ one config

def run_config(torch, F, flashattn, timer, floor, cfg, args, peers_cache):
    d, h, hk, b, s, sq, page = cfg
    dt = torch.bfloat16
    row = {"head_dim": d, "heads": h, "heads_k": hk, "batch": b, "context": s, "seqlen_q": sq,
           "page_size": page, "kv_bytes": kv_bytes(cfg)}
    gen = torch.Generator(device="cuda").manual_seed(1)
    k = torch.randn(b, s, hk, d, dtype=dt, device="cuda", generator=gen)
    v = torch.randn(b, s, hk, d, dtype=dt, device="cuda", generator=gen)
    q = torch.randn(b, sq, h, d, dtype=dt, device="cuda", generator=gen)
    if args.ragged:
        lengths = ragged_lengths(b, s)
        lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        row["kv_bytes"] = 2 * sum(lengths) * hk * d * 2  # the bytes a decode kernel has to read
        row["ragged"] = True
    else:
        lens = torch.full((b,), s - sq if args.append else s, dtype=torch.int32, device="cuda")
    new_kv = dict(k=k[:, s - sq:].clone(), v=v[:, s - sq:].clone()) if args.append else {}
    row["append"] = args.append
    causal = args.causal and sq > 1

    if page:
        # Same keys as the contiguous cache, pages in shuffled physical order.
        per_seq = s // page
        nblocks = b * per_seq
        perm = torch.randperm(nblocks, device="cuda", generator=gen)
        k_cache = k.view(nblocks, page, hk, d)[perm].contiguous()
        v_cache = v.view(nblocks, page, hk, d)[perm].contiguous()
        table = torch.argsort(perm).to(torch.int32).view(b, per_seq)
        call = lambda: flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, **new_kv, cache_seqlens=lens,
                                                         block_table=table, causal=causal, num_splits=args.splits)
    else:
        call = lambda: flashattn.flash_attn_with_kvcache(q, k, v, **new_kv, cache_seqlens=lens, causal=causal,
                                                         num_splits=args.splits)

    try:
        chosen = [x["name"] for x in flashattn.query_backends_kvcache(
            q, k_cache if page else k, v_cache if page else v, cache_seqlens=lens,
            block_table=table if page else None, causal=causal) if x["chosen"]]
        row["backend"] = chosen[0] if chosen else None
    except Exception as e:
        row["backend"] = "query failed: " + repr(e)[:100]

    ours = call()
    ms = timer(graphed(torch, call) if args.graph else call, args.rep_ms)
    row["cuda_decode_ms"] = ms
    row["cuda_decode_tbps"] = row["kv_bytes"] / ms / 1e9
    if floor.kernel is not None:
        try:
            # Ragged: a read of the attended bytes (as many as the kernel reads, laid out contiguously).
            read = floor.read_fn(k, v, row["kv_bytes"] // 4 if args.ragged else None)
            row["read_floor_ms"] = timer(graphed(torch, read) if args.graph else read, args.rep_ms)
            row["x_vs_floor"] = row["read_floor_ms"] / ms
        except Exception as e:
            row["read_floor_error"] = repr(e)[:200]
        for shape in floor.bulk:
            try:
                read = floor.bulk_fn(shape, k, v, row["kv_bytes"] // 4 if args.ragged else None)
                row[f"bulk_floor_{shape[0]}x{shape[1]}_ms"] = timer(graphed(torch, read) if args.graph else read,
                                                                    args.rep_ms)
            except Exception as e:
                row["bulk_floor_error"] = repr(e)[:200]
        bulk = [v for key, v in row.items() if key.startswith("bulk_floor_") and key.endswith("_ms")]
        if bulk:
            row["bulk_floor_ms"] = min(bulk)
            row["x_vs_bulk_floor"] = row["bulk_floor_ms"] / ms

    # Peers on the contiguous layout through (B, H, S, D) views (no copies); their figures are shared by
    # the paged variants of a configuration.
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    key = (d, h, hk, b, s, sq, args.ragged)
    row["peers_padded"] = args.ragged
    if not args.no_peers:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            if (key, name) not in peers_cache:
                try:
                    with sdpa_kernel([be]), torch.no_grad():
                        peer = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
                        t = timer(graphed(torch, peer) if args.graph else peer, args.rep_ms)
                    peers_cache[(key, name)] = (row["kv_bytes"] / t / 1e9, None)
                except Exception as e:
                    peers_cache[(key, name)] = (None, repr(e)[:160])
            row[name + "_tbps"], err = peers_cache[(key, name)]
            if err:
                row[name + "_error"] = err
    if args.fp8:
        # The same keys quantised per (batch, kv head) to e4m3 over amax / 448 (as an FP8 KV cache is kept).
        def quantise(x):
            scale = (x.float().abs().amax(dim=(1, 3)) / 448.0).clamp(min=1e-12)  # (batch, heads_k)
            return (x.float() / scale[:, None, :, None]).to(torch.float8_e4m3fn), scale.contiguous()

        k8, kd = quantise(k)
        v8, vd = quantise(v)
        new8 = dict(new_kv)
        if page:
            k8c = k8.view(torch.uint8).view(nblocks, page, hk, d)[perm].contiguous().view(torch.float8_e4m3fn)
            v8c = v8.view(torch.uint8).view(nblocks, page, hk, d)[perm].contiguous().view(torch.float8_e4m3fn)
            call8 = lambda: flashattn.flash_attn_with_kvcache(q, k8c, v8c, **new8, cache_seqlens=lens, block_table=table,
                                                              causal=causal, num_splits=args.splits, k_descale=kd,
                                                              v_descale=vd)
        else:
            call8 = lambda: flashattn.flash_attn_with_kvcache(q, k8, v8, **new8, cache_seqlens=lens, causal=causal,
                                                              num_splits=args.splits, k_descale=kd, v_descale=vd)
        out8 = call8()
        ms8 = timer(graphed(torch, call8) if args.graph else call8, args.rep_ms)
        row["fp8_ms"] = ms8
        row["fp8_tbps"] = row["kv_bytes"] / 2 / ms8 / 1e9
        row["fp8_x_bf16"] = ms / ms8
        if not causal:  # the quantisation error, beside ours in bf16
            row["fp8_max_abs_diff_vs_bf16"] = (out8.float() - ours.float()).abs().max().item()
    if not causal:
        # A sanity check of the output (not the test suite: tests/cpp/test_cuda_decode.cpp is).
        with torch.no_grad():
            if args.ragged:
                ref = torch.cat([F.scaled_dot_product_attention(qt[i:i + 1], kt[i:i + 1, :, :n], vt[i:i + 1, :, :n],
                                                                enable_gqa=True) for i, n in enumerate(lengths)])
            else:
                ref = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        row["max_abs_diff"] = (ours.float() - ref.transpose(1, 2).float()).abs().max().item()
    for name in ("cudnn", "flash"):
        if row.get(name + "_tbps"):
            row["x_vs_" + name] = row["cuda_decode_tbps"] / row[name + "_tbps"]
    return row


def machine_info(torch):
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "python": platform.python_version(),
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["sms"] = torch.cuda.get_device_properties(0).multi_processor_count
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        info["commit"] = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                                        text=True, timeout=10).stdout.strip()
    except Exception:
        info["commit"] = None
    return info


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def print_table(rows, ceiling):
    print(f"\nK+V read bandwidth (TB/s); ceiling {ceiling:.2f} TB/s; x = cuda_decode / peer; floor us = a read-only "
          "kernel over the same K and V, x floor = floor time / ours; bulk us = the faster bulk-copy probe "
          "(sm_90+)")
    print(f"{'D':>4} {'H/Hk':>6} {'B':>4} {'ctx':>7} {'Sq':>3} {'page':>5} | {'ours':>5} {'%ceil':>6} "
          f"{'cudnn':>6} {'flash':>6} {'x cudnn':>7} {'x flash':>7} | {'us':>8} {'floor us':>8} {'x floor':>7} "
          f"{'bulk us':>8} {'maxdiff':>8}")
    for r in rows:
        if "skipped" in r:
            continue
        pg = str(r["page_size"]) if r["page_size"] else "contig"
        ctx = f"{r['context']}{'r' if r.get('ragged') else ''}"  # r: ragged lengths up to this context
        floor_us = fmt(1e3 * r["read_floor_ms"], "8.1f") if "read_floor_ms" in r else "-"
        bulk_us = fmt(1e3 * r["bulk_floor_ms"], "8.1f") if "bulk_floor_ms" in r else "-"
        print(f"{r['head_dim']:>4} {str(r['heads']) + '/' + str(r['heads_k']):>6} {r['batch']:>4} {ctx:>7} "
              f"{r['seqlen_q']:>3} {pg:>5} | {r['cuda_decode_tbps']:5.2f} {100 * r['cuda_decode_tbps'] / ceiling:5.1f}% "
              f"{fmt(r.get('cudnn_tbps'), '6.2f'):>6} {fmt(r.get('flash_tbps'), '6.2f'):>6} "
              f"{fmt(r.get('x_vs_cudnn'), '7.2f'):>7} {fmt(r.get('x_vs_flash'), '7.2f'):>7} | "
              f"{1e3 * r['cuda_decode_ms']:8.1f} {floor_us:>8} {fmt(r.get('x_vs_floor'), '7.2f'):>7} "
              f"{bulk_us:>8} {fmt(r.get('max_abs_diff'), '8.1e'):>8}"
              + (f" | fp8 {1e3 * r['fp8_ms']:8.1f} us {r['fp8_tbps']:5.2f} TB/s x bf16 {r['fp8_x_bf16']:5.2f}"
                 if "fp8_ms" in r else ""))


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        sys.exit("decode_bench: no CUDA device visible (this benchmark runs on the GPU machine)")
    import flashattn

    if args.ragged and args.append:
        sys.exit("decode_bench: --ragged and --append together are not supported (the appended rows sit at the "
                 "full context)")
    configs = selected_configs(args)
    timer = Timer(torch)
    result = {"machine": machine_info(torch), "args": vars(args), "ceilings": read_ceilings(torch, timer), "rows": []}
    ceiling = result["ceilings"]["ceiling_tbps"]
    floor = ReadFloor(torch)
    if floor.bulk_error:
        result["bulk_probe_error"] = floor.bulk_error
    tiny = torch.zeros(1, device="cuda")
    fill = lambda: tiny.fill_(1.0)
    result["ceilings"]["launch_floor_us"] = 1e3 * timer(graphed(torch, fill) if args.graph else fill, 100)
    print(f"launch floor (one-element fill, same timing): {result['ceilings']['launch_floor_us']:.1f} us", flush=True)
    print("ceilings:", json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                   for k, v in result["ceilings"].items()}), flush=True)
    peers_cache = {}
    t_start = time.perf_counter()
    for cfg in configs:
        if kv_bytes(cfg) > args.max_kv_gib * GIB:
            result["rows"].append({"config": cfg, "skipped": f"K+V above --max-kv-gib {args.max_kv_gib}"})
            continue
        try:
            row = run_config(torch, F, flashattn, timer, floor, cfg, args, peers_cache)
            row["fraction_of_ceiling"] = row["cuda_decode_tbps"] / ceiling
        except Exception as e:
            row = {"config": cfg, "skipped": "error: " + repr(e)[:300]}
            print("error in", cfg, row["skipped"], flush=True)
        result["rows"].append(row)
        if "skipped" not in row:
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
        torch.cuda.empty_cache()
    result["seconds"] = time.perf_counter() - t_start
    print_table(result["rows"], ceiling)
    path = args.out or os.path.join(os.environ.get("OUT", "."), "decode_bench.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{len(result['rows'])} configurations in {result['seconds']:.0f} s; JSON: {path}")


if __name__ == "__main__":
    main()
