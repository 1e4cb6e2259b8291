"""apply_rotary_emb as flash-attn's tests call it: x (batch, seqlen, heads, head_dim), cos/sin
(seqlen_rotary, rotary_dim / 2); position seqlen_offsets + i (an int or a (batch,) tensor) rotates the
first rotary_dim columns, pairs (2r, 2r + 1) when interleaved (GPT-J), else (r, r + rotary_dim / 2)
(GPT-NeoX). Positions past the table are left unrotated. Computed in float32, returned in x's dtype."""

import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    if cu_seqlens is not None:
        raise NotImplementedError("flash_attn alias: apply_rotary_emb with cu_seqlens (the tests do not use it)")
    batch, seqlen = x.shape[:2]
    half = cos.shape[-1]
    positions = torch.arange(seqlen, device=x.device)
    if isinstance(seqlen_offsets, torch.Tensor):
        positions = seqlen_offsets.to(x.device, torch.long).view(-1, 1) + positions
    else:
        positions = (int(seqlen_offsets) + positions).view(1, -1)
    inside = positions < cos.shape[0]
    index = positions.clamp(max=cos.shape[0] - 1)
    c = torch.where(inside[..., None], cos[index].float(), 1.0)[:, :, None, :]  # (batch or 1, seqlen, 1, half)
    s = torch.where(inside[..., None], sin[index].float(), 0.0)[:, :, None, :]
    rot = x[..., : 2 * half].float()
    if interleaved:
        x0, x1 = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    else:
        x0, x1 = rot[..., :half], rot[..., half:]
        rotated = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    out = torch.cat((rotated.to(x.dtype), x[..., 2 * half :]), dim=-1)
    if inplace:
        x.copy_(out)
        return x
    return out
