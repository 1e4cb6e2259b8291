"""torch integration: the attention calls as torch custom ops, so that autograd, torch.compile
(fullgraph=True) and CUDA graphs see one opaque op each.

    flashattn::fwd          (q, k, v, ...) -> (out, softmax_lse)      backward registered: flashattn::bwd
    flashattn::bwd          (dout, q, k, v, out, softmax_lse, ...) -> (dq, dk, dv)
    flashattn::fwd_kvcache  (q, k_cache, v_cache, ...) -> (out, softmax_lse); mutates k_cache, v_cache

The backward saves q, k, v, out, softmax_lse and the dropout rng state: an int64 CPU tensor
[seed, offset] whose seed is drawn from torch's default generator (so torch.manual_seed reproduces it)
and whose offset is 0. Imported on the first call with a torch tensor; importing flashattn alone does not
import torch.

In eager mode the custom-op layer is skipped (see _direct_call): a call with no gradient to record runs
the op's body directly, and one with gradients goes through _EagerAttention, an autograd.Function with the
same body, saved tensors and backward as the op's registration. The op exists for torch.compile, tracing
and dispatch modes; in plain eager mode its dispatch and Python autograd wrapper only cost host time.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _ops
from ._arrays import last_dim_contiguous


def _rng_pair(rng_state):
    return None if rng_state is None else tuple(rng_state.tolist())


def _draw_rng_state():
    seed = torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64)
    return torch.cat((seed, torch.zeros_like(seed)))


def _empty_lse(q, varlen):
    return torch.empty(_ops.lse_shape(q, varlen), dtype=torch.float32, device=q.device)


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
    out, lse, _ = _ops.forward(
        q,
        k,
        v,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        dropout_p=dropout_p,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=(window_left, window_right),
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        rng_state=_rng_pair(rng_state),
    )
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
    return _ops.backward(
        dout,
        q,
        k,
        v,
        out,
        softmax_lse,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        dropout_p=dropout_p,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=(window_left, window_right),
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        rng_state=_rng_pair(rng_state),
        deterministic=deterministic,
    )


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
    dout = last_dim_contiguous(dout)
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


def _fwd_kvcache_body(
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
    return _ops.forward_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        rotary_cos=rotary_cos,
        rotary_sin=rotary_sin,
        cache_seqlens=cache_seqlens if cache_seqlens is not None else cache_seqlens_scalar,
        cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad,
        block_table=block_table,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=(window_left, window_right),
        softcap=softcap,
        rotary_interleaved=rotary_interleaved,
        alibi_slopes=alibi_slopes,
        num_splits=num_splits,
        check_index_values=check_index_values,
    )


fwd_kvcache = torch.library.custom_op("flashattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"))(
    _fwd_kvcache_body
)


@fwd_kvcache.register_fake
def _fwd_kvcache_fake(
    q,
    k_cache,
    v_cache,
    k,
    v,
    rotary_cos,
    rotary_sin,
    cache_seqlens,
    cache_seqlens_scalar,
    cache_batch_idx,
    cache_leftpad,
    block_table,
    softmax_scale,
    causal,
    window_left,
    window_right,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
    check_index_values=False,
):
    return q.new_empty(q.shape), _empty_lse(q, varlen=False)  # contiguous, as the real op's out


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
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    left, right = _ops.window_pair(window_size)
    records_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if _direct_call(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes):
        op = _EagerAttention.apply if records_grad else _fwd_body
    else:
        op = fwd
    return op(
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
    """(out, softmax_lse) through flashattn::fwd_kvcache (no backward, as in flash-attn)."""
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    left, right = _ops.window_pair(window_size)
    if cache_seqlens is None or isinstance(cache_seqlens, Tensor):
        seqlens, seqlens_scalar = cache_seqlens, -1
    else:
        seqlens, seqlens_scalar = None, int(cache_seqlens)
    args = (
        q,
        k_cache,
        v_cache,
        k,
        v,
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
    tensors = [a for a in args if isinstance(a, Tensor)]
    if (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)) or not _direct_call(*tensors):
        return fwd_kvcache(*args)
    result = _fwd_kvcache_body(*args)
    # What the op does for its mutated arguments: autograd then notices a cache it saved was overwritten.
    for cache in (k_cache, v_cache):
        if not cache.is_inference():  # inference tensors have no version counter
            torch.autograd.graph.increment_version(cache)
    return result
