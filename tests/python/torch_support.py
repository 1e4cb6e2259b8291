"""Helpers of the torch tests: devices, skips for calls no backend of this build implements, the naive
low-precision attention, and flash-attn's acceptance criterion against the float64 reference."""

import numpy as np
import pytest
import torch

import flashattn

DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def require_device(device):
    if device == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("torch sees no CUDA device")
        if not flashattn.built_with_cuda() or flashattn.cuda_device_count() == 0:
            pytest.skip("flashattn was built without CUDA backends or sees no device")


def require_support(answers):
    """Skips (with every backend's reason) when no backend of this build supports the call."""
    if not any(a["supported"] for a in answers):
        reasons = "; ".join(f"{a['name']}: {a['reason']}" for a in answers)
        pytest.skip(f"no backend supports this call ({reasons})")


def to_numpy(x):
    return None if x is None else x.detach().to(torch.float64).cpu().numpy()


def from_numpy(x, like):
    return torch.from_numpy(np.ascontiguousarray(x)).to(like.device)


def eps(dtype):
    return torch.finfo(dtype).eps


def within_criterion(got, ref, naive, dtype, name, floor=None):
    """flash-attn's criterion: max|got - ref| <= 2 * max|naive - ref| + floor, floor defaulting to
    4 eps(dtype) max(1, max|ref|) (64 eps for float32), with +inf (empty rows of softmax_lse) required to
    match exactly."""
    got = got.detach().to(torch.float64).cpu()
    ref = torch.as_tensor(ref, dtype=torch.float64).cpu()
    naive = naive.detach().to(torch.float64).cpu()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), finite), f"{name}: non-finite entries differ"
    assert torch.equal(got[~finite], ref[~finite]), f"{name}: infinities differ"
    err = (got - ref)[finite].abs().max().item() if finite.any() else 0.0
    naive_err = (naive - ref)[finite].abs().nan_to_num(0.0).max().item() if finite.any() else 0.0
    scale = max(1.0, ref[finite].abs().max().item() if finite.any() else 1.0)
    if floor is None:
        # For 16-bit dtypes the naive error dominates and a few ulps suffice. For float32 the naive
        # baseline is torch's blocked fp32 matmul, far more accurate than any tiled kernel's running fp32
        # sums over hundreds of rows (the same order of error flash-attn accepts by not testing fp32):
        # allow 64 ulps at the scale of the result.
        floor = (64.0 if dtype == torch.float32 else 4.0) * eps(dtype) * scale
    bound = 2.0 * naive_err + floor
    assert err <= bound, f"{name}: max error {err:.3g} > bound {bound:.3g} (naive {dtype} error {naive_err:.3g})"


def naive_attention(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, dropout_keep=None, dropout_p=0.0):
    """Attention materialised in the inputs' dtype (flash-attn's 'naive low precision' baseline).
    q (B, Sq, H, D), k/v (B, Sk, Hk, D). dropout_keep: bool (B, H, Sq, Sk) or None.
    Returns (out, lse) with lse in float32 from the low-precision scores."""
    batch, sq, heads, dim = q.shape
    sk, heads_k = k.shape[1], k.shape[2]
    scale = dim**-0.5 if softmax_scale is None else softmax_scale
    k = k.repeat_interleave(heads // heads_k, dim=2)
    v = v.repeat_interleave(heads // heads_k, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    diag = i + sk - sq
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.dim() == 2 else alibi_slopes[None].expand(batch, -1)
        s = s - (slopes[:, :, None, None] * (diag - j).abs()[None, None]).to(s.dtype)
    left, right = window_size
    right = 0 if causal else right
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= j >= diag - left
    if right >= 0:
        visible &= j <= diag + right
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    lse = torch.where(visible.any(-1), lse, torch.full_like(lse, float("inf")))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    if dropout_keep is not None:
        p = p.masked_fill(~dropout_keep, 0.0) / (1.0 - dropout_p)
    out = torch.einsum("bhij,bjhd->bihd", p, v)
    return out, lse


def dropout_keep_tensor(seed, offset, p, batch, heads, sq, sk, device):
    """The library's dropout keep mask (B, H, Sq, Sk) from the numpy Philox reference."""
    from attention_reference import dropout_keep

    keep = np.stack([np.stack([dropout_keep(seed, offset, p, b, h, heads, sq, sk) for h in range(heads)])
                     for b in range(batch)])
    return torch.from_numpy(keep).to(device)
