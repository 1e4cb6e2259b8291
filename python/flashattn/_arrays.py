"""What the Python layer needs to know about array frameworks: which one an array belongs to, how to
allocate outputs with it, which stream to run on, and how to hand an array to the native module.

Only numpy and torch are supported by the high-level functions; torch is imported only when a torch
tensor is seen, numpy only when a numpy array is seen, so ``import flashattn`` needs neither.
"""

import sys

from . import _C


def framework(x):
    """'torch' or 'numpy' for a supported array; TypeError otherwise."""
    top = type(x).__module__.partition(".")[0]
    if top in ("torch", "numpy"):
        return top
    raise TypeError(
        f"flashattn: expected a torch.Tensor or a numpy.ndarray, got {type(x).__module__}.{type(x).__qualname__} "
        "(other DLPack arrays can be passed to flashattn._C directly)"
    )


def is_torch(x):
    return type(x).__module__.partition(".")[0] == "torch"


_torch_ops = None  # flashattn._torch_ops once a torch tensor has been seen (it imports torch)


def torch_ops_for(x):
    """flashattn._torch_ops when `x` is a torch tensor, else None; a call's first question, so it is cheap
    once torch is loaded (an isinstance test)."""
    global _torch_ops
    if _torch_ops is not None and isinstance(x, _torch_ops.Tensor):
        return _torch_ops
    if not is_torch(x):
        return None
    from . import _torch_ops as ops

    _torch_ops = ops
    return ops


_FLOAT8 = []


def torch_float8():
    """torch.float8_e4m3fn, or None where torch is not imported or has no float8 (cached once torch is): the
    FP8 tests of the per-call paths are identity checks against it."""
    if not _FLOAT8:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        _FLOAT8.append(getattr(torch, "float8_e4m3fn", None))
    return _FLOAT8[0]


def _numpy_bfloat16():
    """ml_dtypes.bfloat16 when ml_dtypes is installed (it is how numpy spells bfloat16), else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes.bfloat16


def native(x):
    """The object to pass to flashattn._C for array `x` (None stays None). Never copies."""
    if x is None:
        return None
    if is_torch(x):
        # torch refuses to export a tensor that requires grad through DLPack; the data is the same.
        return x.detach() if x.requires_grad else x
    # ml_dtypes types (kind 'V') are the only ones that need ml_dtypes imported to be recognised.
    if type(x).__module__ == "numpy" and x.dtype.kind == "V":
        bf16 = _numpy_bfloat16()
        if bf16 is not None and x.dtype == bf16:
            # numpy cannot export ml_dtypes types; reinterpret the bits as bfloat16 natively.
            import numpy as np

            return _C._bf16_view(x.view(np.uint16))
    return x


def workspace_allocator(x):
    """For a torch CUDA tensor `x`: bytes -> torch.empty(bytes, uint8) on x's device, the kernels' scratch
    memory from torch's caching allocator on the current stream (a CUDA graph then holds no allocation
    nodes); None otherwise (the library allocates)."""
    if is_torch(x) and x.is_cuda:
        import torch

        return lambda n: torch.empty(n, dtype=torch.uint8, device=x.device)
    return None


def stream_of(x):
    """The cudaStream_t (as int) to run on: torch's current stream for CUDA tensors, else 0."""
    if is_torch(x) and x.is_cuda:
        import torch

        return torch.cuda.current_stream(x.device).cuda_stream
    return 0


def last_dim_contiguous(x):
    """`x` itself when its last dim has stride 1 (what the kernels need), else a contiguous copy."""
    if x is None:
        return None
    if is_torch(x):
        return x if x.stride(-1) == 1 else x.contiguous()
    if x.ndim == 0 or x.shape[-1] <= 1 or x.strides[-1] == x.itemsize:
        return x
    import numpy as np

    return np.ascontiguousarray(x)


def empty_like(x):
    """An uninitialised array like `x` (same framework, dtype, device and shape)."""
    if is_torch(x):
        import torch

        return torch.empty_like(x)
    import numpy as np

    return np.empty_like(x)


def empty_contiguous(x):
    """An uninitialised C-contiguous array with the shape, dtype and device of `x`, whatever x's strides: an
    attention output, which flash-attn allocates as a fresh (batch, seqlen, heads, dim) tensor, so that
    out.view(batch, seqlen, -1) works when q is a transposed view. FP8 attention (x float8 e4m3) writes
    bfloat16."""
    if is_torch(x):
        import torch

        dtype = torch.bfloat16 if x.dtype is torch_float8() else x.dtype
        return torch.empty(x.shape, dtype=dtype, device=x.device)
    import numpy as np

    return np.empty(x.shape, dtype=x.dtype)


def empty_float32(shape, like):
    """An uninitialised float32 array of `shape` in the framework and on the device of `like`."""
    if is_torch(like):
        import torch

        return torch.empty(shape, dtype=torch.float32, device=like.device)
    import numpy as np

    return np.empty(shape, dtype=np.float32)


def max_segment(cu_seqlens):
    """The longest sequence described by cumulative lengths `cu_seqlens` (reads them on the host)."""
    if is_torch(cu_seqlens):
        return int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item()) if cu_seqlens.numel() > 1 else 0
    import numpy as np

    return int(np.diff(cu_seqlens).max()) if cu_seqlens.size > 1 else 0


def draw_seed(like):
    """A fresh 63-bit dropout seed from the framework's global generator (seeded by torch.manual_seed or
    numpy.random.seed)."""
    if is_torch(like):
        import torch

        return int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())
    import numpy as np

    return int(np.random.randint(0, 2**63 - 1, dtype=np.int64))

