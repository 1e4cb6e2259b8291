"""Bad calls fail with the C++ library's message, which names the argument, as the documented Python
exception type; and importing flashattn pulls in neither torch nor numpy."""

import re
import subprocess
import sys

import numpy as np
import pytest
from numpy_support import cu_seqlens, randn

import flashattn
from flashattn import _C


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    return randn(rng, (2, 8, 4, 16)), randn(rng, (2, 10, 2, 16)), randn(rng, (2, 10, 2, 16))


def _cache_call(**overrides):
    rng = np.random.default_rng(1)
    args = dict(
        q=randn(rng, (2, 1, 4, 16)),
        k_cache=randn(rng, (2, 12, 2, 16)),
        v_cache=randn(rng, (2, 12, 2, 16)),
        cache_seqlens=np.array([3, 5], np.int32),
    )
    args.update(overrides)
    return lambda: flashattn.flash_attn_with_kvcache(**args)


def _paged_call(table, seqlens=(3, 5)):
    rng = np.random.default_rng(2)
    pages = randn(rng, (4, 3, 2, 16))
    return _cache_call(k_cache=pages, v_cache=pages.copy(), block_table=np.asarray(table, np.int32),
                       cache_seqlens=np.asarray(seqlens, np.int32))


# (description, call on the fixture's q, k, v, the argument the message must name)
DENSE_ERRORS = [
    ("q of 3 dims", lambda q, k, v: flashattn.flash_attn_func(q[0], k, v), "q"),
    ("q of 5 dims", lambda q, k, v: flashattn.flash_attn_func(q[None], k, v), "q"),
    ("q float64", lambda q, k, v: flashattn.flash_attn_func(q.astype(np.float64), k, v), "q"),
    ("k dtype differs", lambda q, k, v: flashattn.flash_attn_func(q, k.astype(np.float16), v), "k"),
    ("v shape differs", lambda q, k, v: flashattn.flash_attn_func(q, k, v[:, :9]), "v"),
    ("head_dim 0", lambda q, k, v: flashattn.flash_attn_func(q[..., :0], k[..., :0], v[..., :0]), "q"),
    ("heads_k not dividing heads", lambda q, k, v: flashattn.flash_attn_func(q[:, :, :3], k, v), "k"),
    ("window left below -1", lambda q, k, v: flashattn.flash_attn_func(q, k, v, window_size=(-2, 0)),
     r"window_size\[0\] \(left\)"),
    ("window not a pair", lambda q, k, v: flashattn.flash_attn_func(q, k, v, window_size=3), "window_size"),
    ("dropout_p >= 1", lambda q, k, v: flashattn.flash_attn_func(q, k, v, dropout_p=1.5), "dropout_p"),
    ("negative softcap", lambda q, k, v: flashattn.flash_attn_func(q, k, v, softcap=-1.0), "softcap"),
    ("alibi of the wrong length",
     lambda q, k, v: flashattn.flash_attn_func(q, k, v, alibi_slopes=np.ones(3, np.float32)), "alibi_slopes"),
    ("alibi float64", lambda q, k, v: flashattn.flash_attn_func(q, k, v, alibi_slopes=np.ones(4)), "alibi_slopes"),
    ("infinite softmax_scale", lambda q, k, v: flashattn.flash_attn_func(q, k, v, softmax_scale=float("inf")),
     "softmax_scale"),
    ("unknown backend", lambda q, k, v: flashattn.forward(q, k, v, backend="no_such_backend"), "options.backend"),
    ("dropout backward without rng_state",
     lambda q, k, v: flashattn.backward(q, q, k, v, q, np.zeros((2, 4, 8), np.float32), dropout_p=0.1), "rng_state"),
    ("lse of the wrong shape",
     lambda q, k, v: flashattn.backward(q, q, k, v, q, np.zeros((2, 4, 7), np.float32)), "softmax_lse"),
]


@pytest.mark.parametrize("description,call,argument", DENSE_ERRORS, ids=[e[0] for e in DENSE_ERRORS])
def test_bad_dense_call_names_the_argument(qkv, description, call, argument):
    with pytest.raises(ValueError, match=rf"{argument}: expected"):
        call(*qkv)


# One dtype vocabulary (the library's: f32, f16, bf16, i32, ...) whether the binding or the C++ checks refuse
# a dtype, and only the dtypes the argument accepts are named as expected.
DTYPE_ERRORS = [
    ("q float64", lambda q, k, v: flashattn.flash_attn_func(q.astype(np.float64), k, v),
     "q: expected dtype f32, f16 or bf16, got f64"),
    ("q int32", lambda q, k, v: flashattn.flash_attn_func(q.astype(np.int32), k, v),
     "q: expected dtype f32, f16 or bf16, got i32"),
    ("q bool", lambda q, k, v: flashattn.flash_attn_func(q > 0, k, v), "q: expected dtype f32, f16 or bf16, got bool"),
    ("alibi float64", lambda q, k, v: flashattn.flash_attn_func(q, k, v, alibi_slopes=np.ones(4)),
     "alibi_slopes: expected dtype f32, got f64"),
    ("cache_seqlens int64", lambda q, k, v: _cache_call(cache_seqlens=np.array([3, 5], np.int64))(),
     "cache_seqlens: expected dtype i32, got i64"),
    ("cache_seqlens float32", lambda q, k, v: _cache_call(cache_seqlens=np.array([3, 5], np.float32))(),
     "cache_seqlens: expected dtype i32, got f32"),
]


@pytest.mark.parametrize("description,call,message", DTYPE_ERRORS, ids=[e[0] for e in DTYPE_ERRORS])
def test_dtype_refusals_speak_one_vocabulary(qkv, description, call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call(*qkv)


def _varlen(q_len=(3, 5), k_len=(4, 6), cu_q=None, cu_k=None, **options):
    rng = np.random.default_rng(3)
    q = randn(rng, (sum(q_len), 2, 16))
    k = randn(rng, (sum(k_len), 2, 16))
    cu_q = cu_seqlens(q_len) if cu_q is None else cu_q
    cu_k = cu_seqlens(k_len) if cu_k is None else cu_k
    return lambda: flashattn.flash_attn_varlen_func(q, k, k.copy(), cu_q, cu_k, max(q_len), max(k_len), **options)


VARLEN_ERRORS = [
    ("cu_seqlens int64", _varlen(cu_q=cu_seqlens([3, 5]).astype(np.int64)), "cu_seqlens_q"),
    ("cu_seqlens not ending at total", _varlen(cu_k=np.array([0, 4, 9], np.int32)), "cu_seqlens_k"),
    ("cu_seqlens decreasing", _varlen(cu_q=np.array([0, 5, 3, 8], np.int32), cu_k=np.array([0, 4, 6, 10], np.int32)),
     "cu_seqlens_q"),
    ("cu_seqlens of different batch", _varlen(cu_k=np.array([0, 10], np.int32)), "cu_seqlens_k"),
]


@pytest.mark.parametrize("description,call,argument", VARLEN_ERRORS, ids=[e[0] for e in VARLEN_ERRORS])
def test_bad_varlen_call_names_the_argument(description, call, argument):
    with pytest.raises(ValueError, match=rf"{argument}: expected"):
        call()


def test_only_one_cu_seqlens_names_the_missing_one(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="cu_seqlens_k: expected"):
        flashattn.forward(q[0], k[0], v[0], cu_seqlens_q=cu_seqlens([8]))


def test_varlen_block_table_needs_paged_keys():
    with pytest.raises(ValueError, match=r"k: expected 4 dims \(num_blocks, page_size, heads_k, head_dim\)"):
        _varlen(block_table=np.zeros((2, 1), np.int32))()


KVCACHE_ERRORS = [
    ("cache_seqlens past the capacity", _cache_call(cache_seqlens=np.array([3, 13], np.int32)),
     r"cache_seqlens\[1\]"),
    ("int cache_seqlens below -1", _cache_call(cache_seqlens=-5), "cache_seqlens"),
    ("cache_seqlens int64", _cache_call(cache_seqlens=np.array([3, 5], np.int64)), "cache_seqlens"),
    ("k without v", _cache_call(k=np.zeros((2, 1, 2, 16), np.float32)), "v_new"),
    ("cache dtype differs", _cache_call(v_cache=np.zeros((2, 12, 2, 16), np.float16)), "v_cache"),
    ("cache_batch_idx out of range", _cache_call(cache_batch_idx=np.array([0, 2], np.int32)), r"cache_batch_idx\[1\]"),
    ("cache_leftpad past cache_seqlens", _cache_call(cache_leftpad=np.array([4, 0], np.int32)), r"cache_leftpad\[0\]"),
    ("rotary wider than the head", _cache_call(rotary_cos=np.ones((12, 9), np.float32),
                                               rotary_sin=np.ones((12, 9), np.float32)), "rotary_cos"),
    ("rotary_cos without rotary_sin", _cache_call(rotary_cos=np.ones((12, 8), np.float32)), "rotary_sin"),
    ("block_table of another batch", _paged_call([[0, 1]]), "block_table"),
    ("block_table entry out of range", _paged_call([[0, 7], [2, 3]], seqlens=(5, 5)), r"block_table\[0\]\[1\]"),
    ("negative num_splits", _cache_call(num_splits=-1), "num_splits"),
]


@pytest.mark.parametrize("description,call,argument", KVCACHE_ERRORS, ids=[e[0] for e in KVCACHE_ERRORS])
def test_bad_kvcache_call_names_the_argument(description, call, argument):
    with pytest.raises(ValueError, match=rf"{argument}: expected"):
        call()


def test_message_is_the_library_message(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError) as info:
        flashattn.flash_attn_func(q, k.astype(np.float16), v)
    assert re.fullmatch(r"flashattn::forward: k: expected .+, got .+", str(info.value))


@pytest.mark.parametrize(
    "status,exception",
    [(1, ValueError), (2, NotImplementedError), (3, RuntimeError), (4, RuntimeError), (5, RuntimeError)],
)
def test_status_maps_to_exception_type(status, exception):
    with pytest.raises(exception, match="^the message$") as info:
        _C._raise_status(status, "the message")
    assert type(info.value) is exception


def test_forcing_a_backend_of_another_device_is_not_implemented(qkv):
    cuda = [b["name"] for b in flashattn.list_backends() if b["device"] == "cuda"]
    if not cuda:
        pytest.skip("no CUDA backend in this build")
    with pytest.raises(NotImplementedError, match=f"backend '{cuda[0]}' does not support this call"):
        flashattn.forward(*qkv, backend=cuda[0])


def test_unsupported_array_type_is_a_type_error():
    with pytest.raises(TypeError, match="torch.Tensor or a numpy.ndarray"):
        flashattn.flash_attn_func([[1.0]], [[1.0]], [[1.0]])


def test_query_backends_direction_is_checked(qkv):
    with pytest.raises(ValueError, match="direction: expected"):
        flashattn.query_backends(*qkv, direction="sideways")


def test_import_needs_neither_torch_nor_numpy():
    code = "import sys, flashattn; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
