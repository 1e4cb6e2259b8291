"""Framework-neutral calls into the native module: allocate the outputs with the inputs' framework, pick
the stream, call flashattn._C. No autograd here; the torch custom ops and the numpy path both use these.

Every argument check lives in the C++ library; errors arrive as ValueError (bad call),
NotImplementedError (no backend implements it) or RuntimeError, with the library's message.
"""

import numbers

from . import _C
from ._arrays import (
    draw_seed,
    empty_contiguous,
    empty_float32,
    empty_like,
    last_dim_contiguous,
    max_segment,
    native,
    stream_of,
    workspace_allocator,
)


def window_pair(window_size):
    """(left, right) from flash-attn's window_size; -1 means unbounded on that side."""
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(f"flashattn: window_size: expected a pair (left, right), got {window_size!r}") from None


def _options(softmax_scale, causal, window_size, softcap, alibi_slopes, backend):
    left, right = window_pair(window_size)
    return dict(
        softmax_scale=None if softmax_scale is None else float(softmax_scale),
        causal=bool(causal),
        window_left=left,
        window_right=right,
        softcap=float(softcap),
        alibi_slopes=native(alibi_slopes),
        backend=backend or "",
    )


def _varlen_bounds(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    if cu_seqlens_q is None or cu_seqlens_k is None:
        return 0, 0
    if max_seqlen_q is None:
        max_seqlen_q = max_segment(cu_seqlens_q)
    if max_seqlen_k is None:
        max_seqlen_k = max_segment(cu_seqlens_k)
    return int(max_seqlen_q), int(max_seqlen_k)


def lse_shape(q, varlen):
    """softmax_lse is (batch, heads, seqlen_q) for dense q, (heads, total_q) for varlen q."""
    if varlen:
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[2], q.shape[1])


def resolve_rng_state(q, dropout_p, rng_state):
    """(seed, offset) of dropout: the caller's, or a fresh seed (offset 0) when dropout is on."""
    if rng_state is not None:
        seed, offset = (int(x) for x in rng_state)
        return seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF
    if dropout_p > 0:
        return draw_seed(q), 0
    return 0, 0


def forward(
    q,
    k,
    v,
    *,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    rng_state=None,
    backend=None,
    block_table=None,
    seqused_k=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Attention forward without autograd. Returns (out, softmax_lse, rng_state).

    Dense: q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, heads_k, head_dim).
    Varlen: q (total_q, heads, head_dim), k/v (total_k, heads_k, head_dim) with int32 cu_seqlens_q/k
    (batch + 1); max_seqlen_q/k default to the longest sequence. softmax_lse is float32 (batch, heads,
    seqlen_q) or (heads, total_q). rng_state is the (seed, offset) of dropout: pass it to `backward`
    (a fresh seed is drawn from the framework's global generator when dropout_p > 0 and none is given).
    `backend` forces a backend by name (see list_backends()); None lets the dispatcher choose.
    Varlen only: block_table int32 (batch, max_blocks) reads k/v as a paged cache (num_blocks, page_size,
    heads_k, head_dim); seqused_k int32 (batch) gives each sequence's key count (flash-attn / vLLM).
    FP8 (flash-attn 3's names): q, k, v torch.float8_e4m3fn, optional float32 (batch, heads_k) q_descale,
    k_descale, v_descale (the factors that turn stored values into real ones; q's per kv head); out is
    bfloat16. No dropout and no backward with FP8.
    """
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    max_q, max_k = _varlen_bounds(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    seed, offset = resolve_rng_state(q, dropout_p, rng_state)
    out = empty_contiguous(q)
    lse = empty_float32(lse_shape(q, varlen), like=q)
    _C.fwd(
        native(q),
        native(k),
        native(v),
        native(out),
        native(lse),
        cu_seqlens_q=native(cu_seqlens_q),
        cu_seqlens_k=native(cu_seqlens_k),
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        dropout_p=float(dropout_p),
        seed=seed,
        offset=offset,
        stream=stream_of(q),
        block_table=native(block_table),
        seqused_k=native(seqused_k),
        q_descale=native(q_descale),
        k_descale=native(k_descale),
        v_descale=native(v_descale),
        **_options(softmax_scale, causal, window_size, softcap, alibi_slopes, backend),
    )
    return out, lse, (seed, offset)


def forward_paged(q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
                  softmax_scale, causal, window_size, softcap, alibi_slopes, rng_state=None):
    """flash_attn_varlen_func's forward over a paged cache and/or with seqused_k, for numpy arrays and for
    the torch op alike: (out, softmax_lse). Forward only (no backward exists for it)."""
    out, lse, _ = forward(
        q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, rng_state=rng_state,
        block_table=block_table, seqused_k=seqused_k,
    )
    return out, lse


def backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    *,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    rng_state=None,
    deterministic=False,
    backend=None,
):
    """Gradients (dq, dk, dv) of `forward` with the same options, from dout and forward's out and
    softmax_lse. With dropout, pass the rng_state that forward returned so the same mask is replayed."""
    if dropout_p > 0 and rng_state is None:
        raise ValueError(
            "flashattn.backward: rng_state: expected the (seed, offset) returned by forward when dropout_p > 0, "
            "got None"
        )
    dout, q, k, v, out = (last_dim_contiguous(x) for x in (dout, q, k, v, out))
    max_q, max_k = _varlen_bounds(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    seed, offset = resolve_rng_state(q, dropout_p, rng_state)
    dq, dk, dv = empty_like(q), empty_like(k), empty_like(v)
    _C.bwd(
        native(dout),
        native(q),
        native(k),
        native(v),
        native(out),
        native(softmax_lse),
        native(dq),
        native(dk),
        native(dv),
        cu_seqlens_q=native(cu_seqlens_q),
        cu_seqlens_k=native(cu_seqlens_k),
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        dropout_p=float(dropout_p),
        seed=seed,
        offset=offset,
        deterministic=bool(deterministic),
        stream=stream_of(q),
        **_options(softmax_scale, causal, window_size, softcap, alibi_slopes, backend),
    )
    return dq, dk, dv


def _cache_seqlens_args(cache_seqlens):
    """flash-attn accepts an int or an int32 array; an int (or None: the whole cache) stays a scalar, so
    no device array has to be made for it (CUDA-graph friendly)."""
    if cache_seqlens is None:
        return None, -1
    if isinstance(cache_seqlens, numbers.Integral):
        return None, int(cache_seqlens)
    return native(cache_seqlens), -1


def forward_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    *,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    backend=None,
    check_index_values=False,
    k_descale=None,
    v_descale=None,
):
    """flash_attn_with_kvcache without autograd; k_cache/v_cache are updated in place when k/v are given.
    Returns (out, softmax_lse) with softmax_lse float32 (batch, heads, seqlen_q). An FP8 cache: k_cache and
    v_cache float8_e4m3fn with optional float32 (batch, heads_k) k_descale / v_descale (stored value x factor
    is the real value; appended rows are stored over their factor, rounded to e4m3)."""
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    seqlens, seqlens_scalar = _cache_seqlens_args(cache_seqlens)
    out = empty_contiguous(q)
    lse = empty_float32(lse_shape(q, varlen=False), like=q)
    _C.fwd_kvcache(
        native(q),
        native(k_cache),
        native(v_cache),
        native(out),
        k_new=native(k),
        v_new=native(v),
        softmax_lse=native(lse),
        cache_seqlens=seqlens,
        cache_seqlens_scalar=seqlens_scalar,
        cache_batch_idx=native(cache_batch_idx),
        cache_leftpad=native(cache_leftpad),
        block_table=native(block_table),
        rotary_cos=native(rotary_cos),
        rotary_sin=native(rotary_sin),
        rotary_interleaved=bool(rotary_interleaved),
        num_splits=int(num_splits),
        stream=stream_of(q),
        workspace_alloc=workspace_allocator(q),
        check_index_values=bool(check_index_values),
        k_descale=native(k_descale),
        v_descale=native(v_descale),
        **_options(softmax_scale, causal, window_size, softcap, alibi_slopes, backend),
    )
    return out, lse


def query_backends(
    q,
    k,
    v,
    *,
    direction="forward",
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    backend=None,
    block_table=None,
    seqused_k=None,
):
    """How each backend answers a forward (direction='forward') or backward ('backward') call with these
    arguments: a list of dicts {name, device, supported, chosen, reason}. Nothing is computed; arguments
    are validated as for the real call (ValueError when the call itself is wrong)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    max_q, max_k = _varlen_bounds(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    out = empty_contiguous(q)
    lse = empty_float32(lse_shape(q, varlen), like=q)
    common = dict(
        cu_seqlens_q=native(cu_seqlens_q),
        cu_seqlens_k=native(cu_seqlens_k),
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        dropout_p=float(dropout_p),
        **_options(softmax_scale, causal, window_size, softcap, alibi_slopes, backend),
    )
    if direction == "forward":
        paged = dict(block_table=native(block_table), seqused_k=native(seqused_k))
        return _C.query_fwd(native(q), native(k), native(v), native(out), native(lse), **paged, **common)
    if direction == "backward":
        dout, dq, dk, dv = empty_like(q), empty_like(q), empty_like(k), empty_like(v)
        inputs = (dout, q, k, v, out, lse, dq, dk, dv)
        return _C.query_bwd(*(native(x) for x in inputs), deterministic=bool(deterministic), **common)
    raise ValueError(f"flashattn.query_backends: direction: expected 'forward' or 'backward', got {direction!r}")


def query_backends_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    *,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    backend=None,
):
    """query_backends for flash_attn_with_kvcache's arguments (nothing is computed or written)."""
    seqlens, seqlens_scalar = _cache_seqlens_args(cache_seqlens)
    out = empty_contiguous(q)
    return _C.query_fwd_kvcache(
        native(q),
        native(k_cache),
        native(v_cache),
        native(out),
        k_new=native(k),
        v_new=native(v),
        cache_seqlens=seqlens,
        cache_seqlens_scalar=seqlens_scalar,
        cache_batch_idx=native(cache_batch_idx),
        cache_leftpad=native(cache_leftpad),
        block_table=native(block_table),
        rotary_cos=native(rotary_cos),
        rotary_sin=native(rotary_sin),
        rotary_interleaved=bool(rotary_interleaved),
        num_splits=int(num_splits),
        **_options(softmax_scale, causal, window_size, softcap, alibi_slopes, backend),
    )
