"""flashattn: exact attention with FlashAttention semantics on CPU and CUDA.

The flash-attn 2.8 functions (flash_attn_func, ..., flash_attn_with_kvcache) take torch tensors or
numpy arrays. forward / backward / forward_kvcache are the same calls without autograd (numpy users get
gradients from `backward`). Importing flashattn imports neither torch nor numpy.
"""

from . import _C
from ._ops import backward, forward, forward_kvcache, query_backends, query_backends_kvcache
from .interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)
from .kvcache import flash_attn_with_kvcache

__version__ = _C.version()


def __getattr__(name):
    # flashattn.distributed (ring attention over torch.distributed) imports torch: load it on first use.
    if name == "distributed":
        import importlib

        return importlib.import_module(".distributed", __name__)
    raise AttributeError(f"module 'flashattn' has no attribute {name!r}")


def list_backends():
    """Every backend compiled in, in dispatch preference order: dicts {name, device}."""
    return _C.list_backends()


def cpu_isa():
    """The instruction-set build of the cpu_flash backend in use ("avx512_bf16", "avx512", "avx2", "generic")."""
    return _C.cpu_isa()


def cpu_isas():
    """cpu_flash's instruction-set builds this CPU runs, best first."""
    return _C.cpu_isas()


def set_cpu_isa(name):
    """Forces one of cpu_isas() for cpu_flash ('' restores the automatic choice; FLASHATTN_CPU_ISA sets it too)."""
    _C.set_cpu_isa(name)


def built_with_cuda():
    """Whether the CUDA backends were compiled into this build."""
    return _C.built_with_cuda()


def cuda_device_count():
    """CUDA devices the runtime sees (0 without CUDA support or without a driver)."""
    return _C.cuda_device_count()


__all__ = [
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_with_kvcache",
    "forward",
    "backward",
    "forward_kvcache",
    "query_backends",
    "query_backends_kvcache",
    "list_backends",
    "built_with_cuda",
    "cpu_isa",
    "cpu_isas",
    "set_cpu_isa",
    "cuda_device_count",
    "__version__",
]
