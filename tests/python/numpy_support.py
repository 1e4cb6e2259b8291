"""Helpers of the numpy tests: dtypes (bfloat16 through ml_dtypes), random inputs, tolerances."""

import numpy as np
import pytest

# Max abs error allowed against the float64 reference (computed from the same rounded inputs), for
# outputs of magnitude ~1: a few ulps of the output dtype plus accumulation error of a float32 kernel.
ATOL = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}
# softmax_lse is always float32 but its inputs carry the rounding of the input dtype.
LSE_ATOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 1e-3}


def np_dtype(name):
    if name == "bfloat16":
        return pytest.importorskip("ml_dtypes").bfloat16
    return np.dtype(name)


def randn(rng, shape, dtype="float32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np_dtype(dtype))


def f64(x):
    return np.asarray(x, dtype=np.float64)


def assert_close(actual, expected, atol, name):
    """Max abs error <= atol; infinities (empty rows of softmax_lse) must match exactly."""
    actual, expected = f64(actual), f64(expected)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    finite = np.isfinite(expected)
    assert np.array_equal(np.isfinite(actual), finite), f"{name}: non-finite entries differ"
    assert np.array_equal(actual[~finite], expected[~finite]), f"{name}: infinities differ"
    err = float(np.max(np.abs(actual[finite] - expected[finite]), initial=0.0))
    assert err <= atol, f"{name}: max abs error {err:.3g} > {atol:.3g}"


def cu_seqlens(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


# batch, seqlen_q, seqlen_k, heads, heads_k, head_dim and the options of each case.
DENSE_CASES = {
    "plain": dict(b=2, sq=17, sk=17, h=4, hk=4, d=32),
    "causal": dict(b=2, sq=17, sk=17, h=4, hk=4, d=32, causal=True),
    "gqa_causal_sq_lt_sk": dict(b=2, sq=13, sk=29, h=6, hk=2, d=16, causal=True),
    "causal_sq_gt_sk_empty_rows": dict(b=1, sq=29, sk=13, h=2, hk=1, d=16, causal=True),
    "mqa_d40": dict(b=2, sq=11, sk=19, h=8, hk=1, d=40),
    "window_both": dict(b=2, sq=23, sk=23, h=2, hk=2, d=16, window=(3, 2)),
    "window_left_causal": dict(b=2, sq=19, sk=25, h=4, hk=2, d=16, window=(4, 0), causal=True),
    "window_right_only": dict(b=1, sq=15, sk=15, h=2, hk=1, d=16, window=(-1, 2)),
    "window_zero": dict(b=1, sq=9, sk=12, h=2, hk=2, d=8, window=(0, 0)),
    "softcap_scale": dict(b=2, sq=16, sk=21, h=4, hk=2, d=32, softcap=5.0, scale=0.5),
    "alibi_heads": dict(b=2, sq=14, sk=14, h=4, hk=4, d=16, alibi="heads", causal=True),
    "alibi_batch_heads": dict(b=3, sq=10, sk=18, h=4, hk=1, d=16, alibi="batch_heads"),
    "everything": dict(b=2, sq=12, sk=20, h=6, hk=3, d=24, causal=True, window=(6, -1), softcap=3.0, alibi="heads"),
    "decode": dict(b=3, sq=1, sk=40, h=4, hk=2, d=32, causal=True),
    "head_dim_256": dict(b=1, sq=9, sk=11, h=2, hk=1, d=256),
}


def make_case(rng, case, dtype="float32"):
    q = randn(rng, (case["b"], case["sq"], case["h"], case["d"]), dtype)
    k = randn(rng, (case["b"], case["sk"], case["hk"], case["d"]), dtype)
    v = randn(rng, (case["b"], case["sk"], case["hk"], case["d"]), dtype)
    alibi = None
    if case.get("alibi") == "heads":
        alibi = rng.uniform(0.05, 0.5, case["h"]).astype(np.float32)
    elif case.get("alibi") == "batch_heads":
        alibi = rng.uniform(0.05, 0.5, (case["b"], case["h"])).astype(np.float32)
    options = dict(
        softmax_scale=case.get("scale"),
        causal=case.get("causal", False),
        window_size=case.get("window", (-1, -1)),
        softcap=case.get("softcap", 0.0),
        alibi_slopes=alibi,
    )
    return q, k, v, options
