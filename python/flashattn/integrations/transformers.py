"""Hugging Face transformers backend: ``register()`` adds the attention implementation "flashattn".

    import flashattn.integrations.transformers as fa_hf
    fa_hf.register()
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="flashattn")

The attention function follows transformers' AttentionInterface: query (batch, heads, seq_q, dim) and
key/value (batch, heads_k, seq_k, dim) in, (attn_output (batch, seq_q, heads, dim), None) out. Padding
masks are handled by unpadding to varlen attention; sliding_window, softcap, GQA and the module's
is_causal map onto flash-attn arguments; dropout applies only while the module is training. The mask
function registered beside it hands the attention the 2D padding mask (or None when nothing is padded),
as transformers does for its flash-attention implementations. Needs transformers >= 4.53 (the
AttentionMaskInterface).
"""

import os

import torch

from .. import _torch_ops
from ._padding import pad, unpad

NAME = "flashattn"


def padding_mask(batch_size, queries=None, kv_length=None, *args, attention_mask=None, **kwargs):
    """AttentionMaskInterface function: the 2D boolean padding mask of the last kv_length keys, or None
    when no key is padded and the mask covers all kv_length keys (then attention runs unpadded with the
    causal flag alone). A mask shorter than kv_length (a static cache, whose unfilled slots are keys too)
    is always returned: the attention then drops the slots it does not cover.

    transformers calls it by keyword; the second argument is q_length from 5.5 on and cache_position
    before (4.53-5.4), and neither is needed here."""
    if attention_mask is None:
        return None
    mask = attention_mask[:, -kv_length:]
    return None if mask.shape[1] == kv_length and bool(mask.all()) else mask


def _window(sliding_window, causal):
    # transformers' sliding window of size W lets query i see keys i - W < j <= i (W keys, itself included).
    if sliding_window is None:
        return (-1, -1)
    return (sliding_window - 1, 0 if causal else sliding_window - 1)


def _fit_mask(mask, kv_length):
    """The padding mask of exactly the kv_length keys: the last ones, or padded with False on the right
    for cache slots the mask does not cover (static caches)."""
    mask = mask.to(torch.bool)
    if mask.shape[1] >= kv_length:
        return mask[:, -kv_length:]
    return torch.nn.functional.pad(mask, (0, kv_length - mask.shape[1]), value=False)


def _packed_boundaries(kwargs, batch, seq_q, seq_k):
    """(cu_seqlens_q, cu_seqlens_k, max_q, max_k) of sequences packed into one row without padding, or None.
    transformers passes them as cu_seq_lens_q/k (padding-free collators, vision encoders), or only as
    position_ids that restart within the row; there is no padding mask in either case."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None:
        max_q = kwargs.get("max_length_q") or int((cu_q[1:] - cu_q[:-1]).max())
        max_k = kwargs.get("max_length_k") or int((cu_k[1:] - cu_k[:-1]).max())
        return cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k)
    positions = kwargs.get("position_ids")
    if positions is None or batch != 1 or seq_q != seq_k or positions.numel() != seq_q:
        return None
    positions = positions.reshape(-1)
    starts = torch.nonzero(positions == positions.min()).flatten()
    if starts.numel() <= 1:
        return None
    cu = torch.cat((starts, starts.new_tensor([seq_q]))).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return cu, cu, longest, longest


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                      softcap=None, **kwargs):
    """The "flashattn" AttentionInterface implementation."""
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            f"flashattn (transformers): attention_mask: expected None or a 2D padding mask (batch, seq_k), got "
            f"{attention_mask.dim()} dims; flashattn.integrations.transformers.register() installs the mask "
            "function that produces it"
        )
    # Every layer of every step comes here: the options are read once each, and the unpadded call goes
    # straight to the torch path (bench/host_cost.py, decode_transformers).
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    causal = bool(causal)
    deterministic = kwargs.get("deterministic")
    if deterministic is None:
        # transformers' rule for its flash-attention backends; it matters only to a backward.
        deterministic = torch.is_grad_enabled() and os.environ.get("FLASH_ATTENTION_DETERMINISTIC", "0") == "1"
    dropout_p = dropout if module.training else 0.0
    window = _window(sliding_window, causal)
    softcap = softcap or 0.0
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # (batch, seq, heads, dim) views
    batch, seq_q = q.shape[:2]
    seq_k = k.shape[1]

    if attention_mask is None:
        packed = _packed_boundaries(kwargs, batch, seq_q, seq_k) if kwargs else None
        if packed is None:
            out, _ = _torch_ops.attention(q, k, v, None, None, None, None, dropout_p, scaling, causal, window, softcap,
                                          None, deterministic)  # fmt: skip
            return out, None
        cu_q, cu_k, max_q, max_k = packed
        out, _ = _torch_ops.attention(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]),
                                      v.reshape(-1, *v.shape[2:]), cu_q, cu_k, max_q, max_k, dropout_p, scaling,
                                      causal, window, softcap, None, deterministic)  # fmt: skip
        return out.reshape(batch, seq_q, *out.shape[1:]), None

    key_mask = _fit_mask(attention_mask, seq_k)
    k_rows, key_indices, cu_seqlens_k, max_k = unpad(k, key_mask)
    v_rows = v.reshape(-1, *v.shape[2:]).index_select(0, key_indices)
    # Queries are the new tokens: the last seq_q positions the mask covers (not of the keys: a static
    # cache's keys run past the mask into unfilled slots).
    q_rows, query_indices, cu_seqlens_q, max_q = unpad(q, attention_mask.to(torch.bool)[:, -seq_q:])
    out_rows, _ = _torch_ops.attention(q_rows, k_rows, v_rows, cu_seqlens_q, cu_seqlens_k, max_q, max_k, dropout_p,
                                       scaling, causal, window, softcap, None, deterministic)  # fmt: skip
    return pad(out_rows, query_indices, batch, seq_q), None


def _skip_flash_package_import(name):
    """Recent transformers treat every implementation whose name contains "flash" as a flash-attention
    package: when a model is created, modeling_utils calls lazy_import_flash_attention(name), which knows only
    flash_attn, flash_attn_interface and hub kernels and raises for anything else. flashattn's functions are
    registered directly and need no import, so that call is skipped for `name` (and only for it)."""
    try:
        from transformers import modeling_utils
    except ImportError:
        return
    original = getattr(modeling_utils, "lazy_import_flash_attention", None)
    if original is None or getattr(original, "_flashattn_skips", None) is not None:
        if original is not None:
            original._flashattn_skips.add(name)
        return

    def lazy_import_flash_attention(implementation, *args, **kwargs):
        if implementation in lazy_import_flash_attention._flashattn_skips:
            return None
        return original(implementation, *args, **kwargs)

    lazy_import_flash_attention._flashattn_skips = {name}
    modeling_utils.lazy_import_flash_attention = lazy_import_flash_attention


def register(name=NAME):
    """Registers the attention function and its mask function under `name` with transformers."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
    _skip_flash_package_import(name)
