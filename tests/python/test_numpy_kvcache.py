"""flash_attn_with_kvcache on numpy arrays against the float64 reference: contiguous and paged caches
(odd page sizes), appending new tokens in place, rotary in both styles, cache_leftpad, cache_batch_idx."""

import numpy as np
import pytest
from attention_reference import kvcache_attention
from numpy_support import ATOL, LSE_ATOL, assert_close, f64, randn

import flashattn


def rotary_tables(rng, seqlen, rotary_dim, dtype="float32"):
    angles = rng.uniform(0, 2 * np.pi, (seqlen, rotary_dim // 2))
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def paged(rng, k_cache, v_cache, page_size):
    """The same logical caches laid out in shuffled pages: (pages, page_size, Hk, D) + block_table."""
    batch, capacity = k_cache.shape[:2]
    blocks = capacity // page_size
    order = rng.permutation(batch * blocks)
    k_pages = np.empty((batch * blocks, page_size) + k_cache.shape[2:], k_cache.dtype)
    v_pages = np.empty_like(k_pages)
    table = order.reshape(batch, blocks).astype(np.int32)
    for b in range(batch):
        for i in range(blocks):
            k_pages[table[b, i]] = k_cache[b, i * page_size : (i + 1) * page_size]
            v_pages[table[b, i]] = v_cache[b, i * page_size : (i + 1) * page_size]
    return k_pages, v_pages, table


def run_and_check(q, k_cache, v_cache, k=None, v=None, **kw):
    """Runs flash_attn_with_kvcache and the reference on copies of the caches; checks out, lse and the
    caches after the in-place append (untouched positions included)."""
    ref_out, ref_lse, ref_k, ref_v = kvcache_attention(
        q, k_cache, v_cache, k, v, store_dtype=k_cache.dtype, scale=kw.get("softmax_scale"),
        causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0),
        alibi=kw.get("alibi_slopes"),
        **{name: kw.get(name) for name in ("cache_seqlens", "cache_batch_idx", "cache_leftpad", "block_table",
                                           "rotary_cos", "rotary_sin")},
        rotary_interleaved=kw.get("rotary_interleaved", True),
    )
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, return_softmax_lse=True, **kw)
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")
    assert_close(k_cache, ref_k, ATOL["float32"], "k_cache")
    assert_close(v_cache, ref_v, ATOL["float32"], "v_cache")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _caches(rng, batch, capacity, heads_k, dim):
    return randn(rng, (batch, capacity, heads_k, dim)), randn(rng, (batch, capacity, heads_k, dim))


@pytest.mark.parametrize("causal", [False, True])
def test_decode_with_int_cache_seqlens(rng, causal):
    kc, vc = _caches(rng, 3, 32, 2, 16)
    q = randn(rng, (3, 1, 4, 16))
    run_and_check(q, kc, vc, cache_seqlens=20, causal=causal)


def test_whole_cache_when_cache_seqlens_is_none(rng):
    kc, vc = _caches(rng, 2, 24, 1, 16)
    q = randn(rng, (2, 3, 2, 16))
    run_and_check(q, kc, vc, causal=True)


@pytest.mark.parametrize("seqlen_new", [1, 5])
def test_append_per_sequence_lengths(rng, seqlen_new):
    kc, vc = _caches(rng, 3, 40, 2, 16)
    q = randn(rng, (3, seqlen_new, 6, 16))
    k, v = randn(rng, (3, seqlen_new, 2, 16)), randn(rng, (3, seqlen_new, 2, 16))
    seqlens = np.array([0, 17, 40 - seqlen_new], dtype=np.int32)
    run_and_check(q, kc, vc, k, v, cache_seqlens=seqlens, causal=True)


@pytest.mark.parametrize("page_size", [1, 3, 5, 7])
def test_paged_cache_with_append(rng, page_size):
    capacity = page_size * (35 // page_size)
    kc, vc = _caches(rng, 2, capacity, 2, 16)
    k_pages, v_pages, table = paged(rng, kc, vc, page_size)
    q = randn(rng, (2, 3, 4, 16))
    k, v = randn(rng, (2, 3, 2, 16)), randn(rng, (2, 3, 2, 16))
    seqlens = np.array([capacity - 3, capacity // 2], dtype=np.int32)
    run_and_check(q, k_pages, v_pages, k, v, cache_seqlens=seqlens, block_table=table, causal=True)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_rotary(rng, interleaved, causal):
    dim, rotary_dim = 32, 16  # rotary on part of the head only
    kc, vc = _caches(rng, 2, 30, 2, dim)
    cos, sin = rotary_tables(rng, 30, rotary_dim)
    q = randn(rng, (2, 4, 4, dim))
    k, v = randn(rng, (2, 4, 2, dim)), randn(rng, (2, 4, 2, dim))
    seqlens = np.array([3, 19], dtype=np.int32)
    run_and_check(q, kc, vc, k, v, cache_seqlens=seqlens, rotary_cos=cos, rotary_sin=sin,
                  rotary_interleaved=interleaved, causal=causal)


def test_rotary_with_local_window_rotates_queries_at_consecutive_positions(rng):
    kc, vc = _caches(rng, 1, 24, 1, 16)
    cos, sin = rotary_tables(rng, 24, 16)
    q = randn(rng, (1, 3, 2, 16))
    k, v = randn(rng, (1, 3, 1, 16)), randn(rng, (1, 3, 1, 16))
    run_and_check(q, kc, vc, k, v, cache_seqlens=np.array([10], np.int32), rotary_cos=cos, rotary_sin=sin,
                  window_size=(4, 4), rotary_interleaved=False)


def test_paged_rotary_append(rng):
    kc, vc = _caches(rng, 2, 15, 2, 16)
    k_pages, v_pages, table = paged(rng, kc, vc, 5)
    cos, sin = rotary_tables(rng, 15, 16)
    q = randn(rng, (2, 2, 2, 16))
    k, v = randn(rng, (2, 2, 2, 16)), randn(rng, (2, 2, 2, 16))
    run_and_check(q, k_pages, v_pages, k, v, cache_seqlens=np.array([4, 13], np.int32), block_table=table,
                  rotary_cos=cos, rotary_sin=sin, causal=True)


def test_cache_leftpad(rng):
    kc, vc = _caches(rng, 3, 28, 2, 16)
    q = randn(rng, (3, 2, 4, 16))
    k, v = randn(rng, (3, 2, 2, 16)), randn(rng, (3, 2, 2, 16))
    seqlens = np.array([10, 20, 5], dtype=np.int32)
    leftpad = np.array([0, 7, 5], dtype=np.int32)  # the last sequence has no old token left
    run_and_check(q, kc, vc, k, v, cache_seqlens=seqlens, cache_leftpad=leftpad, causal=True)


def test_cache_batch_idx(rng):
    kc, vc = _caches(rng, 5, 20, 1, 16)
    q = randn(rng, (3, 1, 2, 16))
    k, v = randn(rng, (3, 1, 1, 16)), randn(rng, (3, 1, 1, 16))
    run_and_check(q, kc, vc, k, v, cache_seqlens=np.array([4, 9, 0], np.int32),
                  cache_batch_idx=np.array([4, 0, 2], np.int32))


def test_options_gqa_window_softcap_alibi_scale(rng):
    kc, vc = _caches(rng, 2, 33, 2, 24)
    q = randn(rng, (2, 4, 6, 24))
    k, v = randn(rng, (2, 4, 2, 24)), randn(rng, (2, 4, 2, 24))
    alibi = rng.uniform(0.05, 0.5, (2, 6)).astype(np.float32)
    run_and_check(q, kc, vc, k, v, cache_seqlens=np.array([12, 25], np.int32), causal=True, window_size=(6, 0),
                  softcap=4.0, alibi_slopes=alibi, softmax_scale=0.4)


def test_returns_out_only_by_default(rng):
    kc, vc = _caches(rng, 1, 8, 1, 8)
    q = randn(rng, (1, 1, 1, 8))
    out = flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=8)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


def test_low_level_forward_kvcache_matches(rng):
    kc, vc = _caches(rng, 2, 16, 2, 16)
    q = randn(rng, (2, 2, 2, 16))
    out, lse = flashattn.forward_kvcache(q, kc, vc, cache_seqlens=np.array([3, 16], np.int32), causal=True)
    ref_out, ref_lse, _, _ = kvcache_attention(q, kc, vc, cache_seqlens=np.array([3, 16]), causal=True)
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_cache(rng, dtype):
    kc, vc = randn(rng, (2, 20, 2, 16), dtype), randn(rng, (2, 20, 2, 16), dtype)
    q = randn(rng, (2, 2, 4, 16), dtype)
    k, v = randn(rng, (2, 2, 2, 16), dtype), randn(rng, (2, 2, 2, 16), dtype)
    seqlens = np.array([5, 18], dtype=np.int32)
    ref_out, _, ref_k, _ = kvcache_attention(q, kc, vc, k, v, cache_seqlens=seqlens, causal=True,
                                             store_dtype=kc.dtype)
    out = flashattn.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, causal=True)
    assert out.dtype == q.dtype
    assert_close(out, ref_out, ATOL[dtype], "out")
    assert_close(kc, ref_k, 0.0, "k_cache")  # appended values are copied exactly
    assert np.array_equal(f64(kc[0, 5:7]), f64(k[0]))
