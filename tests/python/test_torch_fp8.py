"""FP8 attention through the Python API (issue 32's semantics, flash-attn 3's argument names): q, k, v
torch.float8_e4m3fn with optional float32 (batch, heads_k) q_descale, k_descale, v_descale; out bfloat16.
Checked against the float64 numpy reference on the dequantised inputs (stored value x factor, computed here),
on the CPU (cpu_reference runs FP8; the GPU kernels are a later step). Needs torch with float8_e4m3fn."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

from attention_reference import attention  # noqa: E402

import flashattn  # noqa: E402


def quantised(shape, gen):
    return torch.randn(shape, generator=gen).to(torch.float8_e4m3fn)


def dequantised(x, descale, seq_of_row=None):
    """x (B, S, H, D) or varlen (T, H, D) float8 times descale (B, Hk) broadcast over its kv head, float64."""
    values = x.to(torch.float64).numpy()
    if descale is None:
        return values
    d = descale.to(torch.float64).numpy()
    heads = values.shape[-2]
    group = heads // d.shape[1]
    per_head = np.repeat(d, group, axis=1)  # (B, H): head h uses kv head h // group
    if seq_of_row is None:
        return values * per_head[:, None, :, None]
    return values * per_head[seq_of_row][:, :, None]


def check(got, ref, lowp_ref):
    """flash-attn's criterion with a naive bfloat16 computation as the low-precision baseline."""
    assert got.dtype == torch.bfloat16
    err = np.abs(got.to(torch.float64).numpy() - ref).max()
    naive = np.abs(lowp_ref - ref).max()
    bound = 2 * naive + 4 * 2.0**-8 * max(1.0, np.abs(ref).max())
    assert err <= bound, (err, bound)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_descale", [True, False])
def test_fp8_dense_matches_the_dequantised_reference(causal, with_descale, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gen = torch.Generator().manual_seed(3)
    b, sq, sk, h, hk, d = 2, 19, 33, 8, 2, 64
    q, k, v = quantised((b, sq, h, d), gen), quantised((b, sk, hk, d), gen), quantised((b, sk, hk, d), gen)
    descales = [torch.rand((b, hk), generator=gen) * 1.75 + 0.25 if with_descale else None for _ in range(3)]
    dev = torch.device(device)
    out = flashattn.flash_attn_func(q.to(dev), k.to(dev), v.to(dev), causal=causal,
                                    **{name: None if x is None else x.to(dev)
                                       for name, x in zip(("q_descale", "k_descale", "v_descale"), descales)})
    out = out.cpu()
    qd, kd, vd = (dequantised(x, s) for x, s in zip((q, k, v), descales))
    ref, _ = attention(qd, kd, vd, causal=causal)
    lowp, _ = attention(*(torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy() for x in (qd, kd, vd)),
                        causal=causal)
    check(out, ref, lowp)


def test_fp8_varlen_matches_the_dequantised_reference():
    gen = torch.Generator().manual_seed(4)
    lens_q, lens_k, h, hk, d = [5, 0, 17], [9, 4, 30], 4, 2, 128
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32)
    q = quantised((sum(lens_q), h, d), gen)
    k, v = quantised((sum(lens_k), hk, d), gen), quantised((sum(lens_k), hk, d), gen)
    descales = [torch.rand((3, hk), generator=gen) + 0.5 for _ in range(3)]
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                           q_descale=descales[0], k_descale=descales[1], v_descale=descales[2])
    rows_q = np.repeat(np.arange(3), lens_q)
    rows_k = np.repeat(np.arange(3), lens_k)
    qd = dequantised(q, descales[0], rows_q)
    kd, vd = dequantised(k, descales[1], rows_k), dequantised(v, descales[2], rows_k)
    ref, _ = attention(qd, kd, vd, cu_seqlens_q=cu_q.numpy(), cu_seqlens_k=cu_k.numpy(), causal=True)
    bf = [torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy() for x in (qd, kd, vd)]
    lowp, _ = attention(*bf, cu_seqlens_q=cu_q.numpy(), cu_seqlens_k=cu_k.numpy(), causal=True)
    check(out, ref, lowp)


def test_fp8_misuse_names_the_argument():
    gen = torch.Generator().manual_seed(5)
    q = quantised((1, 4, 2, 64), gen)
    k = v = quantised((1, 4, 2, 64), gen)
    with pytest.raises(ValueError, match="q_descale"):
        flashattn.flash_attn_func(q, k, v, q_descale=torch.ones(2, 2))  # (batch, heads_k) = (1, 2)
    with pytest.raises(ValueError, match="dropout_p"):
        flashattn.flash_attn_func(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="k_descale"):
        qb = torch.randn(1, 4, 2, 64, dtype=torch.bfloat16)
        flashattn.flash_attn_func(qb, qb, qb, k_descale=torch.ones(1, 2))  # factors need FP8 inputs


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("paged", [False, True])
def test_fp8_kv_cache_appends_and_attends(paged, device):
    """flash_attn_with_kvcache with a float8 cache: the new rows are stored over their factor rounded to e4m3
    (torch's own float32 -> float8 conversion is the expectation), then q (bfloat16) attends causally over
    the dequantised cache. On CUDA: cuda_decode's FP8 kernels."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gen = torch.Generator().manual_seed(6)
    b, cap, h, hk, d, new, page = 3, 48, 8, 2, 64, 2, 16
    seqlens = torch.tensor([0, 13, 40], dtype=torch.int32)
    k_cache, v_cache = quantised((b, cap, hk, d), gen), quantised((b, cap, hk, d), gen)
    k_descale, v_descale = (torch.rand((b, hk), generator=gen) * 1.5 + 0.5 for _ in range(2))
    q = torch.randn((b, new, h, d), generator=gen).to(torch.bfloat16)
    k_new = torch.randn((b, new, hk, d), generator=gen).to(torch.bfloat16)
    v_new = torch.randn((b, new, hk, d), generator=gen).to(torch.bfloat16)
    expect_k, expect_v = k_cache.clone(), v_cache.clone()
    for i in range(b):
        rows = slice(int(seqlens[i]), int(seqlens[i]) + new)
        expect_k[i, rows] = (k_new[i].float() / k_descale[i][None, :, None]).to(torch.float8_e4m3fn)
        expect_v[i, rows] = (v_new[i].float() / v_descale[i][None, :, None]).to(torch.float8_e4m3fn)
    dev = torch.device(device)
    kw = dict(cache_seqlens=seqlens.to(dev), causal=True, k_descale=k_descale.to(dev), v_descale=v_descale.to(dev))
    q_, k_new_, v_new_ = q.to(dev), k_new.to(dev), v_new.to(dev)
    if paged:  # the same cache as pages of 16 rows in a shuffled pool
        per = cap // page
        table = torch.randperm(b * per, generator=gen).to(torch.int32).reshape(b, per)
        k_pages = torch.empty((b * per, page, hk, d), dtype=torch.float8_e4m3fn)
        v_pages = torch.empty_like(k_pages)
        # (through uint8 views: indexing float8 tensors is not implemented on every torch)
        k_pages.view(torch.uint8)[table.reshape(-1).long()] = k_cache.view(torch.uint8).reshape(b * per, page, hk, d)
        v_pages.view(torch.uint8)[table.reshape(-1).long()] = v_cache.view(torch.uint8).reshape(b * per, page, hk, d)
        k_pages, v_pages = k_pages.to(dev), v_pages.to(dev)
        out = flashattn.flash_attn_with_kvcache(q_, k_pages, v_pages, k_new_, v_new_, block_table=table.to(dev), **kw)
        k_pages, v_pages = k_pages.cpu(), v_pages.cpu()
        got_k = torch.stack([k_pages.view(torch.uint8)[table[i].long()].reshape(cap, hk, d) for i in range(b)])
        got_v = torch.stack([v_pages.view(torch.uint8)[table[i].long()].reshape(cap, hk, d) for i in range(b)])
    else:
        k_dev, v_dev = k_cache.to(dev), v_cache.to(dev)
        out = flashattn.flash_attn_with_kvcache(q_, k_dev, v_dev, k_new_, v_new_, **kw)
        got_k, got_v = k_dev.cpu().view(torch.uint8), v_dev.cpu().view(torch.uint8)
    out = out.cpu()
    assert torch.equal(got_k, expect_k.view(torch.uint8))
    assert torch.equal(got_v, expect_v.view(torch.uint8))
    lens = (seqlens + new).tolist()
    cu_q = np.arange(b + 1) * new
    cu_k = np.concatenate([[0], np.cumsum(lens)])
    kd = np.concatenate([dequantised(expect_k[i:i + 1, :lens[i]], k_descale[i:i + 1])[0] for i in range(b)])
    vd = np.concatenate([dequantised(expect_v[i:i + 1, :lens[i]], v_descale[i:i + 1])[0] for i in range(b)])
    qd = q.to(torch.float64).numpy().reshape(b * new, h, d)
    ref, _ = attention(qd, kd, vd, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    bf = [torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy() for x in (qd, kd, vd)]
    lowp, _ = attention(*bf, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    check(out.reshape(b * new, h, d), ref, lowp)


def test_fp8_kv_cache_misuse_names_the_argument():
    gen = torch.Generator().manual_seed(7)
    q = torch.randn((1, 1, 2, 64), generator=gen).to(torch.bfloat16)
    cache = torch.zeros((1, 8, 2, 64), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q_descale"):
        flashattn.flash_attn_with_kvcache(q, cache, cache, q_descale=torch.ones(1, 2))
    with pytest.raises(ValueError, match="k_descale"):  # factors need an FP8 cache
        flashattn.flash_attn_with_kvcache(q, cache, cache, k_descale=torch.ones(1, 2))
    cache8 = quantised((1, 8, 2, 64), gen)
    with pytest.raises(ValueError, match="v_cache"):  # both caches FP8, or neither
        flashattn.flash_attn_with_kvcache(q, cache8, cache, cache_seqlens=3)
