"""Dropout on numpy arrays: the keep mask is the documented Philox4x32-10 stream, reproduced here
independently, so forward and backward can be checked exactly against the float64 reference."""

import numpy as np
import pytest
from attention_reference import attention, attention_backward, dropout_keep
from numpy_support import ATOL, LSE_ATOL, assert_close, cu_seqlens, f64, randn

import flashattn

# Seeds and offsets with bits above 32 set, so both halves of the Philox key are exercised.
RNG_STATES = [(0x0123456789ABCDEF, 0), (7, 0x00000005_00000003), (2**64 - 1, 12)]


@pytest.mark.parametrize("rng_state", RNG_STATES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_backward_replay_the_reference_mask(rng_state, causal):
    rng = np.random.default_rng(0)
    p = 0.3
    q, k, v = randn(rng, (2, 11, 4, 16)), randn(rng, (2, 14, 2, 16)), randn(rng, (2, 14, 2, 16))
    dout = randn(rng, q.shape)
    out, lse, state = flashattn.forward(q, k, v, dropout_p=p, causal=causal, rng_state=rng_state)
    assert state == rng_state
    ref_out, ref_lse = attention(f64(q), f64(k), f64(v), causal=causal, dropout=(p, *rng_state))
    assert_close(out, ref_out, ATOL["float32"], "out")
    # softmax_lse is that of the undropped softmax.
    assert_close(lse, attention(f64(q), f64(k), f64(v), causal=causal)[1], LSE_ATOL["float32"], "softmax_lse")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")

    grads = flashattn.backward(dout, q, k, v, out, lse, dropout_p=p, causal=causal, rng_state=rng_state)
    refs = attention_backward(f64(dout), f64(q), f64(k), f64(v), causal=causal, dropout=(p, *rng_state))
    atol = ATOL["float32"] * max(1.0, max(float(np.abs(r).max()) for r in refs))
    for got, ref, label in zip(grads, refs, ("dq", "dk", "dv")):
        assert_close(got, ref, atol, label)


def test_varlen_dropout_uses_the_row_within_each_sequence():
    rng = np.random.default_rng(1)
    lq, lk = [6, 9], [8, 5]
    q, k, v = randn(rng, (sum(lq), 2, 16)), randn(rng, (sum(lk), 1, 16)), randn(rng, (sum(lk), 1, 16))
    cu_q, cu_k = cu_seqlens(lq), cu_seqlens(lk)
    state = (1234, 0)
    out, _, _ = flashattn.forward(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout_p=0.25, rng_state=state)
    ref_out, _ = attention(f64(q), f64(k), f64(v), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout=(0.25, *state))
    assert_close(out, ref_out, ATOL["float32"], "out")


def test_reference_mask_drops_about_p():
    keep = dropout_keep(seed=42, offset=0, p=0.2, b=0, h=0, heads=1, sq=256, sk=256)
    assert abs(1.0 - keep.mean() - 0.2) < 0.01


def test_flash_attn_func_seed_comes_from_numpy_global_generator():
    rng = np.random.default_rng(2)
    q, k, v = randn(rng, (1, 16, 2, 16)), randn(rng, (1, 16, 2, 16)), randn(rng, (1, 16, 2, 16))
    np.random.seed(5)
    first = flashattn.flash_attn_func(q, k, v, dropout_p=0.5)
    np.random.seed(5)
    again = flashattn.flash_attn_func(q, k, v, dropout_p=0.5)
    other = flashattn.flash_attn_func(q, k, v, dropout_p=0.5)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    undropped = flashattn.flash_attn_func(q, k, v)
    assert not np.allclose(first, undropped)
