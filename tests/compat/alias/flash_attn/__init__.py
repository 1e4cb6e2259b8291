"""`flash_attn` for flash-attn's own test file, mapped onto flashattn (tests/compat, docs/compat.md).

Only what tests/test_flash_attn.py imports: the seven attention functions (flashattn's own, unchanged),
flash_attn.bert_padding (pad_input, unpad_input), flash_attn.layers.rotary (apply_rotary_emb) and two
names of flash_attn.flash_attn_interface. The helpers are written here for the tests, in plain torch.
"""

from flashattn import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "2.8.3+flashattn"
