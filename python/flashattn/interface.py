"""flash-attn 2.8's attention functions, with the same names, arguments, defaults, layouts and return
values. They take torch tensors (differentiable, torch.compile-able, on the current CUDA stream) or
numpy arrays (CPU backends, forward only; see flashattn.backward for gradients).

Semantics shared by every function:
  * GQA/MQA: k/v may have fewer heads than q (a divisor); query head h uses kv head h // (H // Hk).
  * causal=True is aligned to the bottom-right corner: query i sees keys j <= i + seqlen_k - seqlen_q.
  * window_size=(left, right), -1 unbounded: query i sees keys in
    [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right].
  * softcap > 0: scores become softcap * tanh(scores / softcap).
  * alibi_slopes (heads,) or (batch, heads), float32: adds -slope * |i + seqlen_k - seqlen_q - j|.
  * A query that sees no key gets out 0 and softmax_lse +inf.
  * return_attn_probs=True returns (out, softmax_lse, None): softmax_lse is the float32 natural-log
    log-sum-exp of the (undropped) scores; the attention probabilities themselves are NOT returned
    (flash-attn returns them for testing only; here that slot is None).
"""

from . import _ops
from ._arrays import framework, torch_float8, torch_ops_for


def _attention(
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
    torch_ops = torch_ops_for(q)
    if torch_ops is not None:
        return torch_ops.attention(
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
        )
    framework(q)  # a clear TypeError for arrays of other frameworks
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
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
    )
    return out, lse


def _paged_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
    softmax_scale, causal, window_size, softcap, alibi_slopes,
):
    """The varlen forward over a paged cache and/or with seqused_k (forward only, as in flash-attn)."""
    torch_ops = torch_ops_for(q)
    if torch_ops is not None:
        return torch_ops.attention_paged(
            q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes,
        )
    framework(q)
    return _ops.forward_paged(
        q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
        softmax_scale, causal, window_size, softcap, alibi_slopes,
    )


def _fp8_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                   causal, window_size, softcap, alibi_slopes, descales, block_table=None, seqused_k=None):
    """FP8 attention (q, k, v float8_e4m3fn; flash-attn 3's q/k/v_descale): forward only, out bfloat16. It
    has no backward, so it is the raw op, outside autograd."""
    q_descale, k_descale, v_descale = descales
    out, lse, _ = _ops.forward(
        q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, block_table=block_table,
        seqused_k=seqused_k, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
    )
    return out, lse


def _is_fp8(q, descales):
    """Whether a call is FP8 attention: float8 inputs, or descale factors given (which the library then
    refuses for other dtypes, naming the argument). Paid on every call: attribute and identity checks only
    (torch's float8 dtype is looked up once, and only where torch is already imported)."""
    q_descale, k_descale, v_descale = descales
    if q_descale is not None or k_descale is not None or v_descale is not None:
        return True
    return getattr(q, "dtype", None) is torch_float8()


def _unpack(packed, dim, count, name):
    """The `count` views of a packed array along `dim` (q, k, v of qkv; k, v of kv). torch's unbind makes
    them in one call (~2 us against ~5 for three indexings); numpy arrays are indexed."""
    shape = tuple(packed.shape)
    if len(shape) <= dim or shape[dim] != count:
        raise ValueError(f"flashattn: {name}: expected size {count} in dim {dim}, got shape {list(shape)}")
    unbind = getattr(packed, "unbind", None)
    if unbind is not None:
        return unbind(dim)
    return tuple(packed[(slice(None),) * dim + (i,)] for i in range(count))


def _result(out, lse, return_attn_probs):
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Attention of q (batch, seqlen_q, heads, head_dim) over k, v (batch, seqlen_k, heads_k, head_dim).

    softmax_scale defaults to 1 / sqrt(head_dim); dropout_p should be 0.0 in evaluation. Returns out
    (batch, seqlen_q, heads, head_dim), or (out, softmax_lse (batch, heads, seqlen_q), None) with
    return_attn_probs=True. See the module docstring for masks, GQA, softcap and ALiBi.
    FP8 (flash-attn 3's keywords): q, k, v torch.float8_e4m3fn with optional float32 (batch, heads_k)
    q_descale, k_descale, v_descale; out is bfloat16; forward only (no gradient, no dropout).
    """
    descales = (q_descale, k_descale, v_descale)
    if _is_fp8(q, descales):
        out, lse = _fp8_attention(
            q, k, v, None, None, None, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            descales,
        )
        return _result(out, lse, return_attn_probs)
    out, lse = _attention(
        q, k, v, None, None, None, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        deterministic,
    )
    return _result(out, lse, return_attn_probs)


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_func with q, k, v packed as qkv (batch, seqlen, 3, heads, head_dim)."""
    q, k, v = _unpack(qkv, 2, 3, "qkv")
    return flash_attn_func(
        q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs,
    )


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_func with k, v packed as kv (batch, seqlen_k, 2, heads_k, head_dim)."""
    k, v = _unpack(kv, 2, 2, "kv")
    return flash_attn_func(
        q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs,
    )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    seqused_k=None,
    *,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Attention over sequences of different lengths packed without padding.

    q (total_q, heads, head_dim), k/v (total_k, heads_k, head_dim); cu_seqlens_q/k int32 (batch + 1)
    cumulative lengths; max_seqlen_q/k the longest lengths. Masks are aligned per sequence. Returns out
    (total_q, heads, head_dim), or (out, softmax_lse (heads, total_q), None) with return_attn_probs=True.
    block_table int32 (batch, max_blocks): k/v are a paged cache (num_blocks, page_size, heads_k, head_dim),
    key j of sequence b in block block_table[b, j // page_size], any page_size; cu_seqlens_k then only
    gives the key counts. seqused_k int32 (batch) (flash-attn's C++ varlen_fwd and vLLM's argument, a
    keyword here): sequence b attends to its first seqused_k[b] keys. Both are forward only (no gradient).
    FP8: as flash_attn_func's q_descale, k_descale, v_descale (paged FP8 caches included).
    """
    descales = (q_descale, k_descale, v_descale)
    if _is_fp8(q, descales):
        out, lse = _fp8_attention(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, descales, block_table, seqused_k,
        )
        return _result(out, lse, return_attn_probs)
    if block_table is not None or seqused_k is not None:
        out, lse = _paged_attention(
            q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes,
        )
        return _result(out, lse, return_attn_probs)
    out, lse = _attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
        window_size, softcap, alibi_slopes, deterministic,
    )
    return _result(out, lse, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_varlen_func with q, k, v packed as qkv (total, 3, heads, head_dim) and one cu_seqlens."""
    q, k, v = _unpack(qkv, 1, 3, "qkv")
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal, window_size,
        softcap, alibi_slopes, deterministic, return_attn_probs,
    )


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_varlen_func with k, v packed as kv (total_k, 2, heads_k, head_dim)."""
    k, v = _unpack(kv, 1, 2, "kv")
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
        window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
    )
