"""Forward of every flash-attn function on numpy arrays (CPU backends) against the float64 reference."""

import zlib

import numpy as np
import pytest
from attention_reference import attention
from numpy_support import ATOL, DENSE_CASES, LSE_ATOL, assert_close, cu_seqlens, f64, make_case, randn

import flashattn

def reference(q, k, v, options, **varlen):
    return attention(
        f64(q), f64(k), f64(v), scale=options["softmax_scale"], causal=options["causal"],
        window=options["window_size"], softcap=options["softcap"], alibi=options["alibi_slopes"], **varlen,
    )


@pytest.mark.parametrize("name", DENSE_CASES)
def test_flash_attn_func_matches_reference(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    q, k, v, options = make_case(rng, DENSE_CASES[name])
    out, lse, probs = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **options)
    ref_out, ref_lse = reference(q, k, v, options)
    assert out.dtype == q.dtype and lse.dtype == np.float32 and probs is None
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["causal", "gqa_causal_sq_lt_sk", "everything"])
def test_low_precision_inputs(name, dtype):
    rng = np.random.default_rng(7)
    q, k, v, options = make_case(rng, DENSE_CASES[name], dtype)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **options)
    ref_out, ref_lse = reference(q, k, v, options)
    assert out.dtype == q.dtype
    assert_close(out, ref_out, ATOL[dtype], "out")
    assert_close(lse, ref_lse, LSE_ATOL[dtype], "softmax_lse")


def test_empty_rows_give_zero_output_and_infinite_lse():
    rng = np.random.default_rng(3)
    q, k, v, options = make_case(rng, DENSE_CASES["causal_sq_gt_sk_empty_rows"])
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **options)
    empty = q.shape[1] - k.shape[1]  # bottom-right causal: the first sq - sk queries see no key
    assert np.all(out[:, :empty] == 0)
    assert np.all(np.isposinf(lse[:, :, :empty]))
    assert np.all(np.isfinite(lse[:, :, empty:]))


def test_returns_out_only_by_default():
    rng = np.random.default_rng(0)
    q, k, v, options = make_case(rng, DENSE_CASES["plain"])
    out = flashattn.flash_attn_func(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


def test_strided_views_are_read_in_place():
    rng = np.random.default_rng(1)
    # (B, H, S, D) storage seen as (B, S, H, D), and q read-only: no copy is needed for either.
    q = randn(rng, (2, 4, 13, 16)).transpose(0, 2, 1, 3)
    k = randn(rng, (2, 2, 21, 16)).transpose(0, 2, 1, 3)
    v = randn(rng, (2, 2, 21, 16)).transpose(0, 2, 1, 3)
    q.flags.writeable = False
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    ref_out, _ = attention(f64(q), f64(k), f64(v), causal=True)
    assert_close(out, ref_out, ATOL["float32"], "out")
    # out is a fresh (B, S, H, D) array whatever q's strides, as flash-attn allocates it.
    assert out.flags.c_contiguous and out.shape == q.shape


def test_non_contiguous_last_dim_is_accepted():
    rng = np.random.default_rng(2)
    q = randn(rng, (1, 9, 2, 32))[..., ::2]  # stride 2 in the last dim: copied, as flash-attn does
    k = randn(rng, (1, 11, 2, 16))
    v = randn(rng, (1, 11, 2, 16))
    out = flashattn.flash_attn_func(q, k, v)
    assert_close(out, attention(f64(q), f64(k), f64(v))[0], ATOL["float32"], "out")


@pytest.mark.parametrize("causal", [False, True])
def test_qkvpacked(causal):
    rng = np.random.default_rng(4)
    qkv = randn(rng, (2, 15, 3, 4, 16))
    out, lse, _ = flashattn.flash_attn_qkvpacked_func(qkv, causal=causal, return_attn_probs=True)
    ref_out, ref_lse = attention(f64(qkv[:, :, 0]), f64(qkv[:, :, 1]), f64(qkv[:, :, 2]), causal=causal)
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")


def test_kvpacked_gqa_window():
    rng = np.random.default_rng(5)
    q = randn(rng, (2, 12, 6, 16))
    kv = randn(rng, (2, 18, 2, 3, 16))
    out = flashattn.flash_attn_kvpacked_func(q, kv, window_size=(5, 1), softcap=2.0)
    ref_out, _ = attention(f64(q), f64(kv[:, :, 0]), f64(kv[:, :, 1]), window=(5, 1), softcap=2.0)
    assert_close(out, ref_out, ATOL["float32"], "out")


# Sequence lengths of q and k per batch entry; one empty sequence and one with more queries than keys.
VARLEN_Q = [5, 0, 17, 9, 12]
VARLEN_K = [7, 3, 17, 1, 20]


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(causal=True),
        dict(window_size=(3, 1), softcap=4.0),
        dict(causal=True, alibi_slopes="batch_heads", softmax_scale=0.3),
    ],
    ids=["plain", "causal", "window_softcap", "causal_alibi_scale"],
)
def test_varlen(options):
    rng = np.random.default_rng(6)
    heads, heads_k, dim = 4, 2, 16
    q = randn(rng, (sum(VARLEN_Q), heads, dim))
    k = randn(rng, (sum(VARLEN_K), heads_k, dim))
    v = randn(rng, (sum(VARLEN_K), heads_k, dim))
    cu_q, cu_k = cu_seqlens(VARLEN_Q), cu_seqlens(VARLEN_K)
    options = dict(options)
    if options.get("alibi_slopes") == "batch_heads":
        options["alibi_slopes"] = rng.uniform(0.05, 0.5, (len(VARLEN_Q), heads)).astype(np.float32)
    out, lse, _ = flashattn.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(VARLEN_Q), max(VARLEN_K), return_attn_probs=True, **options
    )
    ref_out, ref_lse = attention(
        f64(q), f64(k), f64(v), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, scale=options.get("softmax_scale"),
        causal=options.get("causal", False), window=options.get("window_size", (-1, -1)),
        softcap=options.get("softcap", 0.0), alibi=options.get("alibi_slopes"),
    )
    assert lse.shape == (heads, sum(VARLEN_Q))
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")


def test_varlen_qkvpacked():
    rng = np.random.default_rng(8)
    lengths = [6, 11, 1]
    qkv = randn(rng, (sum(lengths), 3, 4, 16))
    cu = cu_seqlens(lengths)
    out = flashattn.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lengths), causal=True)
    ref_out, _ = attention(f64(qkv[:, 0]), f64(qkv[:, 1]), f64(qkv[:, 2]), cu_seqlens_q=cu, cu_seqlens_k=cu,
                           causal=True)
    assert_close(out, ref_out, ATOL["float32"], "out")


def test_varlen_kvpacked():
    rng = np.random.default_rng(9)
    lq, lk = [4, 9], [10, 3]
    q = randn(rng, (sum(lq), 4, 16))
    kv = randn(rng, (sum(lk), 2, 1, 16))
    cu_q, cu_k = cu_seqlens(lq), cu_seqlens(lk)
    out = flashattn.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, max(lq), max(lk), causal=True)
    ref_out, _ = attention(f64(q), f64(kv[:, 0]), f64(kv[:, 1]), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    assert_close(out, ref_out, ATOL["float32"], "out")


def test_low_level_forward_reports_no_dropout_state():
    rng = np.random.default_rng(10)
    q, k, v, options = make_case(rng, DENSE_CASES["plain"])
    out, lse, rng_state = flashattn.forward(q, k, v, **options)
    assert rng_state == (0, 0)
    assert_close(out, reference(q, k, v, options)[0], ATOL["float32"], "out")


def test_query_backends_names_the_chosen_cpu_backend():
    rng = np.random.default_rng(11)
    q, k, v, _ = make_case(rng, DENSE_CASES["plain"])
    answers = flashattn.query_backends(q, k, v, causal=True)
    names = [b["name"] for b in flashattn.list_backends()]
    assert [a["name"] for a in answers] == names
    chosen = [a for a in answers if a["chosen"]]
    assert len(chosen) == 1 and chosen[0]["device"] == "cpu" and chosen[0]["supported"]
    assert all(a["reason"] for a in answers if not a["supported"])


# Empty calls return empty results of the right shapes, as PyTorch SDPA does: no batch, no heads, no queries,
# no keys (every row empty: out 0, LSE +inf), in the dense, backward and KV-cache calls.
EMPTY_SHAPES = {
    "no batch": ((0, 5, 4, 16), (0, 7, 2, 16)),
    "no heads": ((2, 5, 0, 16), (2, 7, 0, 16)),
    "no queries": ((2, 0, 4, 16), (2, 7, 2, 16)),
    "no keys": ((2, 5, 4, 16), (2, 0, 2, 16)),
}


@pytest.mark.parametrize("name", EMPTY_SHAPES)
def test_empty_calls_return_empty_results(name):
    q_shape, k_shape = EMPTY_SHAPES[name]
    rng = np.random.default_rng(11)
    q, k, v = randn(rng, q_shape), randn(rng, k_shape), randn(rng, k_shape)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert np.all(out == 0) and np.all(lse == np.inf)  # vacuous except with no keys
    dq, dk, dv = flashattn.backward(randn(rng, q_shape), q, k, v, out, lse, causal=True)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert np.all(dq == 0) and np.all(dk == 0) and np.all(dv == 0)
    # Slices of a larger array (what q[:0] gives) are accepted too, whatever their strides.
    big_q, big_k = randn(rng, (2, 5, 4, 16)), randn(rng, (2, 7, 2, 16))
    sl = {"no batch": np.s_[:0], "no heads": np.s_[:, :, :0], "no queries": np.s_[:, :0], "no keys": np.s_[:]}[name]
    ksl = np.s_[:, :0] if name == "no keys" else sl
    assert flashattn.flash_attn_func(big_q[sl], big_k[ksl], big_k[ksl].copy()).shape == big_q[sl].shape


def test_empty_kvcache_calls_return_empty_results():
    rng = np.random.default_rng(12)
    for q_shape, cache_shape, seqlens in [((0, 1, 4, 16), (0, 12, 2, 16), []), ((2, 1, 0, 16), (2, 12, 0, 16), [3, 5])]:
        out = flashattn.flash_attn_with_kvcache(
            randn(rng, q_shape), randn(rng, cache_shape), randn(rng, cache_shape),
            cache_seqlens=np.asarray(seqlens, np.int32))
        assert out.shape == q_shape
