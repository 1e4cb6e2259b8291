"""Moving between padded (batch, seqlen, ...) tensors and the packed rows of varlen attention."""

import torch
import torch.nn.functional as F


def unpad(padded, mask):
    """Rows of `padded` (batch, seqlen, ...) where the bool `mask` (batch, seqlen) is True, in batch-major
    order. Returns (rows (total, ...), indices (total,) into batch * seqlen, cu_seqlens int32 (batch + 1),
    max_seqlen). Reads the lengths on the host (one synchronisation)."""
    lengths = mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    max_seqlen = int(lengths.max().item()) if lengths.numel() else 0
    rows = padded.reshape(-1, *padded.shape[2:]).index_select(0, indices)
    return rows, indices, cu_seqlens, max_seqlen


def pad(rows, indices, batch, seqlen):
    """Inverse of unpad: a zero (batch, seqlen, ...) tensor with `rows` placed back at `indices`."""
    flat = rows.new_zeros((batch * seqlen, *rows.shape[1:]))
    flat = flat.index_put((indices,), rows)
    return flat.reshape(batch, seqlen, *rows.shape[1:])
