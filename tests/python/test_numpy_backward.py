"""flashattn.backward on numpy arrays against the analytic float64 backward, which is itself checked
against finite differences of the reference forward."""

import numpy as np
import pytest
from attention_reference import attention, attention_backward
from numpy_support import ATOL, DENSE_CASES, assert_close, cu_seqlens, f64, make_case, randn

import flashattn


def _grad_atol(dtype, *refs):
    # Gradients grow with the sequence length; compare relative to the largest reference entry.
    return ATOL[dtype] * max(1.0, max(float(np.abs(r).max()) for r in refs))


def _reference_kwargs(options):
    return dict(
        scale=options["softmax_scale"],
        causal=options["causal"],
        window=options["window_size"],
        softcap=options["softcap"],
        alibi=options["alibi_slopes"],
    )


def test_analytic_reference_matches_finite_differences():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 5, 4, 8))
    k = rng.standard_normal((2, 7, 2, 8))
    v = rng.standard_normal((2, 7, 2, 8))
    dout = rng.standard_normal((2, 5, 4, 8))
    kw = dict(scale=0.7, causal=True, window=(4, -1), softcap=2.5, alibi=rng.uniform(0.1, 0.5, 4))

    def loss(q, k, v):
        return float(np.sum(attention(q, k, v, **kw)[0] * dout))

    dq, dk, dv = attention_backward(dout, q, k, v, **kw)
    eps = 1e-6
    inputs = {"q": q, "k": k, "v": v}
    for name, grad in zip(("q", "k", "v"), (dq, dk, dv)):
        for index in [tuple(rng.integers(0, s) for s in grad.shape) for _ in range(12)]:

            def shifted_loss(delta):
                moved = inputs[name].copy()
                moved[index] += delta
                return loss(**{**inputs, name: moved})

            numeric = (shifted_loss(eps) - shifted_loss(-eps)) / (2 * eps)
            assert abs(numeric - grad[index]) <= 1e-6 * max(1.0, abs(numeric)), f"d{name}{index}"


BACKWARD_CASES = ["plain", "causal", "gqa_causal_sq_lt_sk", "causal_sq_gt_sk_empty_rows", "window_both",
                  "softcap_scale", "alibi_batch_heads", "everything", "mqa_d40"]


@pytest.mark.parametrize("name", BACKWARD_CASES)
def test_backward_matches_reference(name):
    rng = np.random.default_rng(len(name))
    q, k, v, options = make_case(rng, DENSE_CASES[name])
    dout = randn(rng, q.shape)
    out, lse, rng_state = flashattn.forward(q, k, v, **options)
    dq, dk, dv = flashattn.backward(dout, q, k, v, out, lse, rng_state=rng_state, **options)
    refs = attention_backward(f64(dout), f64(q), f64(k), f64(v), **_reference_kwargs(options))
    atol = _grad_atol("float32", *refs)
    for got, ref, label in zip((dq, dk, dv), refs, ("dq", "dk", "dv")):
        assert got.dtype == np.float32
        assert_close(got, ref, atol, label)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_backward_low_precision(dtype):
    rng = np.random.default_rng(1)
    q, k, v, options = make_case(rng, DENSE_CASES["gqa_causal_sq_lt_sk"], dtype)
    dout = randn(rng, q.shape, dtype)
    out, lse, _ = flashattn.forward(q, k, v, **options)
    dq, dk, dv = flashattn.backward(dout, q, k, v, out, lse, **options)
    refs = attention_backward(f64(dout), f64(q), f64(k), f64(v), **_reference_kwargs(options))
    atol = _grad_atol(dtype, *refs)
    for got, ref, label in zip((dq, dk, dv), refs, ("dq", "dk", "dv")):
        assert got.dtype == q.dtype
        assert_close(got, ref, atol, label)


def test_varlen_backward():
    rng = np.random.default_rng(2)
    lq, lk = [5, 0, 13, 7], [9, 4, 13, 2]
    cu_q, cu_k = cu_seqlens(lq), cu_seqlens(lk)
    q = randn(rng, (sum(lq), 6, 16))
    k = randn(rng, (sum(lk), 2, 16))
    v = randn(rng, (sum(lk), 2, 16))
    dout = randn(rng, q.shape)
    kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lq), max_seqlen_k=max(lk), causal=True,
              window_size=(5, -1), softcap=3.0)
    out, lse, _ = flashattn.forward(q, k, v, **kw)
    dq, dk, dv = flashattn.backward(dout, q, k, v, out, lse, **kw)
    refs = attention_backward(f64(dout), f64(q), f64(k), f64(v), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                              causal=True, window=(5, -1), softcap=3.0)
    atol = _grad_atol("float32", *refs)
    for got, ref, label in zip((dq, dk, dv), refs, ("dq", "dk", "dv")):
        assert_close(got, ref, atol, label)


def test_deterministic_backward_is_bitwise_reproducible():
    rng = np.random.default_rng(3)
    q, k, v, options = make_case(rng, DENSE_CASES["gqa_causal_sq_lt_sk"])
    dout = randn(rng, q.shape)
    out, lse, _ = flashattn.forward(q, k, v, **options)
    first = flashattn.backward(dout, q, k, v, out, lse, deterministic=True, **options)
    second = flashattn.backward(dout, q, k, v, out, lse, deterministic=True, **options)
    for a, b in zip(first, second):
        assert np.array_equal(a, b)
