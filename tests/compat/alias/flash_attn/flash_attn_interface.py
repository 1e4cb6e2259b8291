"""The names the test file imports from flash_attn.flash_attn_interface.

_get_block_size_n serves only to decode the S_dmask that flash-attn returns for dropout tests; flashattn
returns no attention probabilities (None in that slot), so those cases are excluded (docs/compat.md) and
this raises if anything still calls it. USE_TRITON_ROCM is False: this is no ROCm build.
"""

USE_TRITON_ROCM = False


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    raise NotImplementedError(
        "flash_attn alias: _get_block_size_n decodes flash-attn's S_dmask, which flashattn does not return "
        "(the dropout cases that read it are excluded, see docs/compat.md)"
    )
