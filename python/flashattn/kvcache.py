"""flash-attn 2.8's flash_attn_with_kvcache: attention of new queries against a (possibly paged) KV
cache, optionally appending new keys/values (with rotary embedding) into the cache first."""

from . import _ops
from ._arrays import framework, torch_float8, torch_ops_for


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
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
    return_softmax_lse=False,
    *,
    check_index_values=False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Attention of q (batch, seqlen_q, heads, head_dim) over the cache.

    k_cache/v_cache: (batch_cache, seqlen_cache, heads_k, head_dim), or with block_table (batch,
    max_blocks) int32 a paged cache (num_blocks, page_size, heads_k, head_dim); any page_size >= 1 works
    (flash-attn requires multiples of 256). cache_seqlens: int or int32 (batch,), the lengths before this
    call (None: the whole cache). k/v (batch, seqlen_new, heads_k, head_dim): written *in place* into the
    cache at positions cache_seqlens[b] + t before attending. rotary_cos/sin (seqlen_ro, rotary_dim / 2)
    rotate k at its cache positions and q at cache_seqlens[b] (+ i when causal or local); interleaved
    pairs (0, 1), (2, 3), ... or, with rotary_interleaved=False, GPT-NeoX halves. cache_batch_idx
    (batch,) int32 selects cache rows; cache_leftpad (batch,) int32 is the first valid cache position.
    num_splits is a hint for the GPU decode kernels (0 chooses). Returns out (batch, seqlen_q, heads,
    head_dim), or (out, softmax_lse (batch, heads, seqlen_q)) with return_softmax_lse=True. No backward.
    check_index_values (a flashattn keyword; FLASHATTN_CHECK_INDEX_VALUES=1 does the same for every call):
    on CUDA, validate cache_seqlens, block_table, cache_batch_idx and cache_leftpad on the device first and
    raise the named error (batch and value) instead of clamping them; a stream sync, refused during CUDA
    graph capture. CPU calls are always checked.
    FP8 cache (flash-attn 3's names): k_cache and v_cache float8_e4m3fn, q, k, v 16/32-bit, optional float32
    (batch, heads_k) k_descale / v_descale: stored value x factor is the real value, and appended rows are
    stored over their factor rounded to e4m3 (nearest even, saturating at +-448). q_descale (for FP8 queries)
    is not taken: q stays 16/32-bit here.
    """
    if q_descale is not None:
        raise ValueError("q_descale: flash_attn_with_kvcache takes 16/32-bit q (an FP8 cache has k_descale and "
                         "v_descale); pass q unscaled and q_descale=None")
    if k_descale is not None or v_descale is not None or getattr(k_cache, "dtype", None) is torch_float8():
        # The FP8 cache is the raw call: no gradient flows through a cache, and the registered torch ops do
        # not take descales.
        out, lse = _ops.forward_kvcache(
            q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_seqlens=cache_seqlens,
            cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad, block_table=block_table,
            softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
            rotary_interleaved=rotary_interleaved, alibi_slopes=alibi_slopes, num_splits=num_splits,
            check_index_values=check_index_values, k_descale=k_descale, v_descale=v_descale,
        )
        return (out, lse) if return_softmax_lse else out
    torch_ops = torch_ops_for(q)
    if torch_ops is not None:
        out, lse = torch_ops.attention_kvcache(
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
            check_index_values,
        )
    else:
        framework(q)  # a clear TypeError for arrays of other frameworks
        out, lse = _ops.forward_kvcache(
            q,
            k_cache,
            v_cache,
            k,
            v,
            rotary_cos=rotary_cos,
            rotary_sin=rotary_sin,
            cache_seqlens=cache_seqlens,
            cache_batch_idx=cache_batch_idx,
            cache_leftpad=cache_leftpad,
            block_table=block_table,
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=window_size,
            softcap=softcap,
            rotary_interleaved=rotary_interleaved,
            alibi_slopes=alibi_slopes,
            num_splits=num_splits,
            check_index_values=check_index_values,
        )
    return (out, lse) if return_softmax_lse else out
