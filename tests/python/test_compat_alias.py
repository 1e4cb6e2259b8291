"""The helpers of the compatibility gate's `flash_attn` alias (tests/compat/alias, docs/compat.md) that
flash-attn's test file builds its inputs and references with: unpad/pad round trips, and rotary against
the float64 reference's. Needs torch."""

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attention_reference import rotate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat" / "alias"))
from flash_attn.bert_padding import pad_input, unpad_input  # noqa: E402
from flash_attn.layers.rotary import apply_rotary_emb  # noqa: E402


def test_unpad_then_pad_restores_the_kept_rows():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 2, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 0], [1] * 7, [0] * 7], dtype=torch.bool)
    rows, indices, cu, max_len, used = unpad_input(x, mask)
    assert rows.shape == (10, 2, 5)
    assert cu.tolist() == [0, 3, 10, 10] and cu.dtype == torch.int32
    assert max_len == 7 and used.tolist() == [3, 7, 0]
    back = pad_input(rows, indices, 3, 7)
    assert torch.equal(back[mask], x[mask])
    assert torch.equal(back[~mask], torch.zeros_like(x[~mask]))


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotary_matches_the_reference(interleaved):
    gen = torch.Generator().manual_seed(1)
    batch, seqlen, heads, dim, rd = 2, 5, 3, 12, 8
    x = torch.randn(batch, seqlen, heads, dim, generator=gen, dtype=torch.float64)
    angle = torch.rand(20, rd // 2, generator=gen, dtype=torch.float64) * 6.28
    cos, sin = torch.cos(angle), torch.sin(angle)
    offsets = torch.tensor([3, 11], dtype=torch.int32)
    got = apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
    for b in range(batch):
        want = rotate(x[b].numpy(), cos.numpy(), sin.numpy(), np.arange(seqlen) + int(offsets[b]), interleaved)
        np.testing.assert_allclose(got[b].numpy(), want, rtol=1e-6, atol=1e-6)  # float32 arithmetic inside
