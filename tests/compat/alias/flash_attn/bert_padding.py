"""pad_input / unpad_input of flash-attn's bert_padding, as its tests use them: between a padded batch
(batch, seqlen, ...) with a boolean key mask (batch, seqlen) and the packed varlen rows (total, ...)."""

import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """Rows of `hidden_states` where the mask (or unused_mask) is set, packed. Returns (rows, indices into
    the flattened batch, cu_seqlens int32 (batch + 1), the longest sequence, used tokens per sequence)."""
    kept = attention_mask.bool() if unused_mask is None else attention_mask.bool() | unused_mask.bool()
    seqlens = kept.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    rows = hidden_states.reshape(-1, *hidden_states.shape[2:])[indices]
    return rows, indices, cu_seqlens, max_seqlen, used


def pad_input(hidden_states, indices, batch, seqlen):
    """The inverse: packed rows back at `indices` of a zero (batch, seqlen, ...) tensor."""
    out = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    out = out.index_put((indices,), hidden_states)
    return out.view(batch, seqlen, *hidden_states.shape[1:])
