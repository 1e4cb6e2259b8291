"""torch integration: the attention calls as torch custom ops, so that autograd, torch.compile
(fullgraph=True) and CUDA graphs see one opaque op each.

    flashattn::fwd          (q, k, v, ...) -> (out, softmax_lse)      backward registered: flashattn::bwd
    flashattn::bwd          (dout, q, k, v, out, softmax_lse, ...) -> (dq, dk, dv)
    flashattn::fwd_kvcache         (q, k_cache, v_cache, ...) -> (out, softmax_lse); reads the caches only
    flashattn::fwd_kvcache_append  (q, k_cache, v_cache, k, v, ...) -> (out, softmax_lse); mutates k_cache, v_cache

The KV-cache call is two ops because only an append writes the caches: an op that declares mutated inputs
keeps torch.compile(mode="reduce-overhead") from capturing its graph, so a read-only decode step must not
declare any.

The backward saves q, k, v, out, softmax_lse and the dropout rng state: an int64 CPU tensor
[seed, offset] whose seed is drawn from torch's default generator (so torch.manual_seed reproduces it)
and whose offset is 0. Imported on the first call with a torch tensor; importing flashattn alone does not
import torch.

In eager mode the custom-op layer is skipped (see _direct_call): a call with no gradient to record runs
the op's body directly, and one with gradients goes through _EagerAttention, an autograd.Function with the
same body, saved tensors and backward as the op's registration. The op exists for torch.compile, tracing
and dispatch modes; in plain eager mode its dispatch and Python autograd wrapper only cost host time.

Host cost per call is the point of this file's shape (bench/host_cost.py measures it): each body is one
positional call of flashattn._C, which reads plain tensors through DLPack's C exchange API, allocates out
and softmax_lse with torch and runs on torch's current stream itself (no Python allocation, stream or
workspace lookup per call). Tensors the native module cannot read that way (subclasses, or every tensor
on a torch without that API) take the general path: outputs allocated here, the stream passed explicitly.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C, _ops


def _last_dim_contiguous(x):
    return x if x is None or x.stride(-1) == 1 else x.contiguous()


def _seed_offset(rng_state):
    if rng_state is None:
        return 0, 0
    seed, offset = rng_state.tolist()  # a CPU tensor: no device synchronisation
    return seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF


def _draw_rng_state():
    seed = torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64)
    return torch.cat((seed, torch.zeros_like(seed)))


def _empty_lse(q, varlen):
    return torch.empty(_ops.lse_shape(q, varlen), dtype=torch.float32, device=q.device)


# Whether flashattn._C can read plain tensors through DLPack's C exchange API (torch >= 2.10), and so
# allocate outputs with torch and find the current stream itself.
_EXCHANGE = hasattr(Tensor, "__dlpack_c_exchange_api__")


def _readable(*tensors):
    """True when flashattn._C reads every tensor through the exchange API: plain tensors (not subclasses)."""
    return _EXCHANGE and all(t is None or type(t) is Tensor for t in tensors)


def _native(x):
    # A subclass goes through __dlpack__, which refuses a tensor that requires grad; the data is the same.
    return x.detach() if x is not None and x.requires_grad else x


def _stream(q):
    return torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else 0


def _workspace(q):
    """torch's caching allocator for the kernels' scratch memory, for calls the exchange API does not serve."""
    if not q.is_cuda:
        return None
    return lambda n: torch.empty(n, dtype=torch.uint8, device=q.device)


def _torch_function(path):
    """torch.<path> (a private function _direct_call needs), or None when this torch has no such thing."""
    obj = torch
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return obj


_functorch_active = _torch_function("_C._are_functorch_transforms_active")
_dispatch_modes = _torch_function("_C._len_torch_dispatch_stack")
_profiler_enabled = _torch_function("autograd._profiler_enabled")
# Without any of them the shortcut could not tell that something is watching: the ops then always run.
_SHORTCUT = None not in (_functorch_active, _dispatch_modes, _profiler_enabled)


def _direct_call(*tensors):
    """True when a call may run the op's body instead of the op: eager mode (neither torch.compile, torch.jit
    tracing nor a torch.func transform) on plain tensors (fake, functional and other tracing tensors are
    subclasses), with no dispatch mode (FlopCounterMode, debug modes) and no profiler that would want to
    see the op."""
    if not _SHORTCUT or torch.compiler.is_compiling() or torch.jit.is_tracing() or _functorch_active():
        return False
    if _dispatch_modes() > 0 or _profiler_enabled():
        return False
    return all(t is None or type(t) is Tensor for t in tensors)


def _fwd_body(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    rng_state: Optional[Tensor],
    deterministic: bool,
) -> Tuple[Tensor, Tensor]:
    seed, offset = _seed_offset(rng_state)
    options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right)
    if _readable(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes):
        return _C.fwd(q, k, v, None, None, cu_seqlens_q, cu_seqlens_k, *options, alibi_slopes, softcap, dropout_p,
                      seed, offset, "", None)  # fmt: skip
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = _empty_lse(q, cu_seqlens_q is not None)
    inputs = (_native(x) for x in (q, k, v))
    _C.fwd(*inputs, out, lse, _native(cu_seqlens_q), _native(cu_seqlens_k), *options, _native(alibi_slopes), softcap,
           dropout_p, seed, offset, "", _stream(q))  # fmt: skip
    return out, lse


fwd = torch.library.custom_op("flashattn::fwd", mutates_args=())(_fwd_body)


@fwd.register_fake
def _fwd_fake(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p,
    softmax_scale,
    causal,
    window_left,
    window_right,
    softcap,
    alibi_slopes,
    rng_state,
    deterministic,
):
    return q.new_empty(q.shape), _empty_lse(q, cu_seqlens_q is not None)  # contiguous, as the real op's out


def _bwd_body(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    softmax_lse: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    rng_state: Optional[Tensor],
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    seed, offset = _seed_offset(rng_state)
    # Gradients take their inputs' strides, as flash-attn's do.
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right)
    tensors = (dout, q, k, v, out, softmax_lse)
    if _readable(*tensors, cu_seqlens_q, cu_seqlens_k, alibi_slopes):
        stream = None
    else:
        tensors = tuple(_native(x) for x in tensors)
        cu_seqlens_q, cu_seqlens_k, alibi_slopes = (_native(x) for x in (cu_seqlens_q, cu_seqlens_k, alibi_slopes))
        stream = _stream(q)
    _C.bwd(*tensors, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, *options, alibi_slopes, softcap, dropout_p, seed, offset,
           deterministic, "", stream)  # fmt: skip
    return dq, dk, dv


bwd = torch.library.custom_op("flashattn::bwd", mutates_args=())(_bwd_body)


@bwd.register_fake
def _bwd_fake(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p,
    softmax_scale,
    causal,
    window_left,
    window_right,
    softcap,
    alibi_slopes,
    rng_state,
    deterministic,
):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _fwd_setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, scale, causal, left, right, softcap, alibi, rng, det) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi, rng)
    ctx.options = (max_q, max_k, dropout_p, scale, causal, left, right, softcap)
    ctx.deterministic = det


def _fwd_backward(ctx, dout, _dlse):
    q, k, v, out, lse, cu_q, cu_k, alibi, rng = ctx.saved_tensors
    max_q, max_k, dropout_p, scale, causal, left, right, softcap = ctx.options
    dout = _last_dim_contiguous(dout)
    op = _bwd_body if _direct_call(dout, q, k, v, out, lse, cu_q, cu_k, alibi) else bwd
    dq, dk, dv = op(
        dout,
        q,
        k,
        v,
        out,
        lse,
        cu_q,
        cu_k,
        max_q,
        max_k,
        dropout_p,
        scale,
        causal,
        left,
        right,
        softcap,
        alibi,
        rng,
        ctx.deterministic,
    )
    # One gradient per input of fwd: q, k, v, then none for the 13 non-differentiable ones.
    return (dq, dk, dv) + (None,) * 13


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


class _EagerAttention(torch.autograd.Function):
    """flashattn::fwd's autograd registration as a plain autograd.Function, for eager calls: the same body,
    saved tensors and backward, without the op's dispatch and its Python autograd wrapper. forward takes
    ctx itself: with a separate setup_context, Function.apply binds the arguments through
    inspect.signature on every call (~25 us)."""

    @staticmethod
    def forward(ctx, *args):
        output = _fwd_body(*args)
        _fwd_setup_context(ctx, args, output)
        return output

    backward = staticmethod(_fwd_backward)


def _kvcache_run(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_scalar,
                 cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal, window_left, window_right,
                 softcap, rotary_interleaved, alibi_slopes, num_splits, check_index_values):  # fmt: skip
    tensors = (q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, cache_leftpad, block_table, rotary_cos,
               rotary_sin, alibi_slopes)  # fmt: skip
    options = (rotary_interleaved, softmax_scale, causal, window_left, window_right)
    if _readable(*tensors):
        return _C.fwd_kvcache(q, k_cache, v_cache, None, k, v, None, cache_seqlens, cache_seqlens_scalar,
                              cache_batch_idx, cache_leftpad, block_table, rotary_cos, rotary_sin, *options,
                              alibi_slopes, softcap, num_splits, "", None, None, check_index_values)  # fmt: skip
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = _empty_lse(q, varlen=False)
    (q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, cache_leftpad, block_table, rotary_cos, rotary_sin,
     alibi_slopes) = (_native(x) for x in tensors)  # fmt: skip
    _C.fwd_kvcache(q, k_cache, v_cache, out, k, v, lse, cache_seqlens, cache_seqlens_scalar, cache_batch_idx,
                   cache_leftpad, block_table, rotary_cos, rotary_sin, *options, alibi_slopes, softcap, num_splits, "",
                   _stream(q), _workspace(q), check_index_values)  # fmt: skip
    return out, lse


def _fwd_kvcache_body(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    rotary_cos: Optional[Tensor],
    rotary_sin: Optional[Tensor],
    cache_seqlens: Optional[Tensor],
    cache_seqlens_scalar: int,
    cache_batch_idx: Optional[Tensor],
    cache_leftpad: Optional[Tensor],
    block_table: Optional[Tensor],
    softmax_scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    rotary_interleaved: bool,
    alibi_slopes: Optional[Tensor],
    num_splits: int,
    check_index_values: bool = False,
) -> Tuple[Tensor, Tensor]:
    return _kvcache_run(q, k_cache, v_cache, None, None, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_scalar,
                        cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal, window_left, window_right,
                        softcap, rotary_interleaved, alibi_slopes, num_splits, check_index_values)  # fmt: skip


def _fwd_kvcache_append_body(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Optional[Tensor],
    v: Optional[Tensor],
    rotary_cos: Optional[Tensor],
    rotary_sin: Optional[Tensor],
    cache_seqlens: Optional[Tensor],
    cache_seqlens_scalar: int,
    cache_batch_idx: Optional[Tensor],
    cache_leftpad: Optional[Tensor],
    block_table: Optional[Tensor],
    softmax_scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    rotary_interleaved: bool,
    alibi_slopes: Optional[Tensor],
    num_splits: int,
    check_index_values: bool = False,
) -> Tuple[Tensor, Tensor]:
    return _kvcache_run(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_scalar,
                        cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal, window_left, window_right,
                        softcap, rotary_interleaved, alibi_slopes, num_splits, check_index_values)  # fmt: skip


# Read-only: no k/v argument at all, so that nothing can be appended through an op that declares no mutation.
fwd_kvcache = torch.library.custom_op("flashattn::fwd_kvcache", mutates_args=())(_fwd_kvcache_body)
fwd_kvcache_append = torch.library.custom_op("flashattn::fwd_kvcache_append", mutates_args=("k_cache", "v_cache"))(
    _fwd_kvcache_append_body
)


@fwd_kvcache.register_fake
def _fwd_kvcache_fake(q, *args):
    return q.new_empty(q.shape), _empty_lse(q, varlen=False)  # contiguous, as the real op's out


@fwd_kvcache_append.register_fake
def _fwd_kvcache_append_fake(q, *args):
    return q.new_empty(q.shape), _empty_lse(q, varlen=False)


def _window(window_size):
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        return _ops.window_pair(window_size)  # raises flashattn's ValueError


def _fwd_paged_body(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    block_table: Optional[Tensor],
    seqused_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    rng_state: Optional[Tensor],
) -> Tuple[Tensor, Tensor]:
    return _ops.forward_paged(
        q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
        softmax_scale, causal, (window_left, window_right), softcap, alibi_slopes,
        None if rng_state is None else tuple(rng_state.tolist()),
    )


# The varlen forward over a paged cache (block_table) or with seqused_k: flash-attn has no backward for it
# (the library refuses both in backward), so the op's autograd says so when a gradient reaches it.
fwd_paged = torch.library.custom_op("flashattn::fwd_paged", mutates_args=())(_fwd_paged_body)


@fwd_paged.register_fake
def _fwd_paged_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, *options):
    return q.new_empty(q.shape), _empty_lse(q, varlen=True)


def _fwd_paged_backward(ctx, dout, dlse):
    raise NotImplementedError(
        "flashattn.flash_attn_varlen_func: block_table / seqused_k: the forward over a paged cache has no "
        "backward (as in flash-attn); call it without gradients"
    )


fwd_paged.register_autograd(_fwd_paged_backward, setup_context=lambda ctx, inputs, output: None)


def attention_paged(
    q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
    softmax_scale, causal, window_size, softcap, alibi_slopes,
):
    """(out, softmax_lse) of a varlen forward with block_table and/or seqused_k, through flashattn::fwd_paged."""
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    left, right = _window(window_size)
    if max_seqlen_q is None or max_seqlen_k is None:
        max_seqlen_q, max_seqlen_k = _ops._varlen_bounds(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    args = (
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        block_table,
        seqused_k,
        int(max_seqlen_q),
        int(max_seqlen_k),
        float(dropout_p),
        None if softmax_scale is None else float(softmax_scale),
        bool(causal),
        left,
        right,
        float(softcap),
        alibi_slopes,
        _draw_rng_state() if dropout_p > 0 else None,
    )
    tensors = [a for a in args if isinstance(a, Tensor)]
    records_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return _fwd_paged_body(*args) if not records_grad and _direct_call(*tensors) else fwd_paged(*args)


def attention(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    deterministic,
):
    """(out, softmax_lse) through flashattn::fwd, differentiable in q, k and v."""
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    left, right = _window(window_size)
    args = (
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        0 if max_seqlen_q is None else max_seqlen_q,
        0 if max_seqlen_k is None else max_seqlen_k,
        float(dropout_p),
        None if softmax_scale is None else float(softmax_scale),
        bool(causal),
        left,
        right,
        float(softcap),
        alibi_slopes,
        _draw_rng_state() if dropout_p > 0 else None,
        bool(deterministic),
    )
    if not _direct_call(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes):
        return fwd(*args)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(*args)
    return _fwd_body(*args)


def attention_kvcache(
    q,
    k_cache,
    v_cache,
    k,
    v,
    rotary_cos,
    rotary_sin,
    cache_seqlens,
    cache_batch_idx,
    cache_leftpad,
    block_table,
    softmax_scale,
    causal,
    window_size,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
    check_index_values=False,
):
    """(out, softmax_lse) through flashattn::fwd_kvcache, or flashattn::fwd_kvcache_append when k or v is given
    (no backward, as in flash-attn)."""
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    left, right = _window(window_size)
    if cache_seqlens is None or isinstance(cache_seqlens, Tensor):
        seqlens, seqlens_scalar = cache_seqlens, -1
    else:
        seqlens, seqlens_scalar = None, int(cache_seqlens)
    options = (
        rotary_cos,
        rotary_sin,
        seqlens,
        seqlens_scalar,
        cache_batch_idx,
        cache_leftpad,
        block_table,
        None if softmax_scale is None else float(softmax_scale),
        bool(causal),
        left,
        right,
        float(softcap),
        bool(rotary_interleaved),
        alibi_slopes,
        int(num_splits),
        bool(check_index_values),
    )
    append = k is not None or v is not None
    tensors = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, seqlens, cache_batch_idx, cache_leftpad, block_table,
               alibi_slopes)  # fmt: skip
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    if grad or not _direct_call(*tensors):
        if append:
            return fwd_kvcache_append(q, k_cache, v_cache, k, v, *options)
        return fwd_kvcache(q, k_cache, v_cache, *options)
    result = _kvcache_run(q, k_cache, v_cache, k, v, *options)
    if append:
        # What the op does for its mutated arguments: autograd then notices a cache it saved was overwritten.
        for cache in (k_cache, v_cache):
            if not cache.is_inference():  # inference tensors have no version counter
                torch.autograd.graph.increment_version(cache)
    return result
