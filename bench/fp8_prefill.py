"""FP8 (e4m3) prefill forward (issue 32) against the bf16 forward and the peers, in one process on one GPU:
FlashAttention's sweep (hidden 2048, heads = 2048 / D, batch = 16384 / S), causal and not.

Arms (each timed only where it runs; a backend that declines the call is reported as declined):
  fp8_sm90     flashattn.forward on e4m3 q, k, v forced onto cuda_sm90 (the native FP8 kernel: P in e4m3,
               wgmma k32, V^T in shared memory)
  fp8_cuda     the same call forced onto cuda_fp8 (dequantise to bf16, then the bf16 kernel)
  bf16         flashattn.forward on the bf16 inputs, the dispatcher's choice
  sdpa_cudnn   PyTorch SDPA's cuDNN backend on the bf16 inputs
Inputs: randn in bf16; the FP8 arms get them quantised per (batch, kv head) with the factor amax / 448 and
pass that factor as q_descale / k_descale / v_descale (flash-attn 3's names).

Accuracy (issue 32: next to the bf16 kernel's) on a slice (batch 0, head 0, the last --check-rows queries):
RMSE and max error of each arm against a float64 reference of the inputs that arm was given (the FP8 arms:
the dequantised e4m3 values; bf16 and cuDNN: the bf16 values).

Timing as bench/compare_torch.py (interleaved rounds of triton's do_bench, L2 flushed; ratios are medians
of per-round ratios). TFLOP/s: 4 B H S^2 D, halved when causal.

    python bench/fp8_prefill.py --out bench/results/fp8_prefill.json
    python bench/fp8_prefill.py --dims 128 --seqlens 4096,8192 --causal false
"""

import argparse
import datetime
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402  (timing helpers)

ARMS = ("fp8_sm90", "fp8_cuda", "bf16", "sdpa_cudnn")
E4M3_MAX = 448.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", type=ct._int_list, default=(128,), help="head dims (default 128)")
    p.add_argument("--seqlens", type=ct._int_list, default=(1024, 2048, 4096, 8192, 16384))
    p.add_argument("--causal", choices=("both", "true", "false"), default="both")
    p.add_argument("--arms", type=ct._choice_list(ARMS), default=ARMS)
    p.add_argument("--rep", type=int, default=60, help="timed ms per arm and configuration over all rounds")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--check-rows", type=int, default=128)
    p.add_argument("--out", default="fp8_prefill.json")
    return p.parse_args(argv)


def quantise(torch, x):
    """x (B, S, Hk, D) -> (e4m3 tensor, float32 (B, Hk) descale) with per-(batch, head) factor amax / 448."""
    amax = x.float().abs().amax(dim=(1, 3)).clamp_min(1e-12)
    descale = (amax / E4M3_MAX).contiguous()
    x8 = (x.float() / descale[:, None, :, None]).to(torch.float8_e4m3fn)
    return x8, descale


def reference(torch, q, k, v, causal, rows):
    """Output of the last `rows` queries of (S, D) float inputs, in float64."""
    q, k, v = (x.double() for x in (q, k, v))
    seqlen, dim = q.shape
    first = seqlen - rows
    scores = (q[first:] @ k.T) * dim**-0.5
    if causal:
        i = torch.arange(first, seqlen, device=q.device)[:, None]
        j = torch.arange(seqlen, device=q.device)[None, :]
        scores = scores.masked_fill(j > i, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def main(argv=None):
    args = parse_args(argv)
    import torch
    import flashattn

    rows_out = []
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name(), torch=torch.__version__, commit=ct.git_commit(),
                command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]))
    print(json.dumps(meta))
    for dim in args.dims:
        for causal in {"both": (False, True), "true": (True,), "false": (False,)}[args.causal]:
            for seqlen in args.seqlens:
                batch, heads = max(1, ct.TOKENS // seqlen), ct.HIDDEN // dim
                problem = dict(dim=dim, causal=causal, seqlen=seqlen, batch=batch, heads=heads, dtype="bf16")
                gen = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(batch, seqlen, heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
                           for _ in range(3))
                (q8, qd), (k8, kd), (v8, vd) = (quantise(torch, x) for x in (q, k, v))
                q_bhsd, k_bhsd, v_bhsd = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                rows = min(args.check_rows, seqlen)

                def fp8(backend):
                    return lambda: flashattn.forward(q8, k8, v8, causal=causal, backend=backend, q_descale=qd,
                                                     k_descale=kd, v_descale=vd)[0]

                def cudnn():
                    from torch.nn.attention import SDPBackend, sdpa_kernel

                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                        return torch.nn.functional.scaled_dot_product_attention(q_bhsd, k_bhsd, v_bhsd,
                                                                                is_causal=causal).transpose(1, 2)

                calls = {"fp8_sm90": fp8("cuda_sm90"), "fp8_cuda": fp8("cuda_fp8"),
                         "bf16": lambda: flashattn.forward(q, k, v, causal=causal)[0], "sdpa_cudnn": cudnn}
                deq = [(x8[0, :, 0].float() * d[0, 0]) for x8, d in ((q8, qd), (k8, kd), (v8, vd))]
                ref_fp8 = reference(torch, *deq, causal, rows)
                ref_bf16 = reference(torch, q[0, :, 0], k[0, :, 0], v[0, :, 0], causal, rows)
                runs, row = {}, dict(problem, arms={})
                for name in args.arms:
                    try:
                        with torch.no_grad():
                            out = calls[name]()
                    except Exception as e:  # a backend that declines (head dim, mask) says why
                        row["arms"][name] = dict(declined=str(e).splitlines()[0][:200])
                        continue
                    torch.cuda.synchronize()
                    ref = ref_fp8 if name.startswith("fp8") else ref_bf16
                    diff = out[0, -rows:, 0].double() - ref
                    row["arms"][name] = dict(rmse=diff.pow(2).mean().sqrt().item(), max_err=diff.abs().max().item(),
                                             finite=bool(torch.isfinite(out).all().item()))
                    runs[name] = calls[name]
                with torch.no_grad():
                    times = ct.time_interleaved(torch, runs, args)
                for name, ts in times.items():
                    ms = ct.median(ts)
                    row["arms"][name].update(ms=ms, tflops=ct.flops(problem, "fwd") / ms * 1e-9, rounds_ms=ts)
                for name in times:
                    for peer in times:
                        if peer != name and name.startswith("fp8"):
                            row["arms"][name][f"x_{peer}"] = ct.paired_ratio(times[name], times[peer])
                rows_out.append(row)
                print(json.dumps(row))
    with open(args.out, "w") as f:
        json.dump(dict(meta, rows=rows_out), f, indent=1)
    for row in rows_out:
        cells = []
        for name, arm in row["arms"].items():
            cells.append(f"{name} " + ("declined" if "declined" in arm else
                                        f"{arm['tflops']:.0f} TF/s rmse {arm['rmse']:.2e}"))
        print(f"D={row['dim']} S={row['seqlen']} causal={row['causal']}: " + "; ".join(cells))
    return 0 if all(math.isfinite(a.get("rmse", 0.0)) and a.get("finite", True)
                    for r in rows_out for a in r["arms"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
