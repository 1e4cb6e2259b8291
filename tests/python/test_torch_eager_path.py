"""The host-side shortcuts of the torch path, which must change nothing but time:

* eager calls skip the torch custom ops (flashattn/_torch_ops.py): without gradients the op's body runs
  directly, with gradients an autograd.Function with the op's body and backward; both give the ops'
  results bit for bit, and a dispatch mode still sees the ops; the KV-cache call still bumps the caches'
  version counters;
* the native module reads plain torch tensors through their attributes instead of DLPack
  (python/src/torch_view.cpp): views with any strides and storage offsets read right, and what it does
  not handle (subclasses, float64, the meta device) still goes through DLPack and its checks."""

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch_support import require_device  # noqa: E402

import flashattn  # noqa: E402
import flashattn._torch_ops as torch_ops  # noqa: E402
from flashattn import _C  # noqa: E402

DEVICES = ["cuda", "cpu"]


def _dtype(device):
    return torch.bfloat16 if device == "cuda" else torch.float32


def _qkv(device, b=2, sq=33, sk=47, h=4, hk=2, d=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)]
    return [torch.randn(*s, generator=gen).to(device=device, dtype=_dtype(device)) for s in shapes]


class _CountingOp:
    """Stands in for torch_ops.fwd: counts the calls that go through the custom op."""

    def __init__(self, op):
        self.op, self.calls = op, 0

    def __call__(self, *args):
        self.calls += 1
        return self.op(*args)


class _RecordingMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_eager_calls_skip_the_ops_and_match_them_bit_for_bit(device, monkeypatch):
    require_device(device)
    q, k, v = _qkv(device)
    dout = torch.randn_like(q)
    # Through the ops: a dispatch mode sees them, so the shortcuts stand aside.
    ql = q.clone().requires_grad_()
    with _RecordingMode() as mode:
        op_out = flashattn.flash_attn_func(ql, k, v, causal=True)
        (op_dq,) = torch.autograd.grad(op_out, (ql,), dout)
    assert any(op.startswith("flashattn.fwd") for op in mode.ops), mode.ops
    assert any(op.startswith("flashattn.bwd") for op in mode.ops), mode.ops

    fwd_op, bwd_op = _CountingOp(torch_ops.fwd), _CountingOp(torch_ops.bwd)
    monkeypatch.setattr(torch_ops, "fwd", fwd_op)
    monkeypatch.setattr(torch_ops, "bwd", bwd_op)
    with torch.no_grad():
        direct = flashattn.flash_attn_func(q, k, v, causal=True)
    flashattn.flash_attn_func(q, k, v, causal=True)  # grad mode on, but nothing requires grad
    ql = q.clone().requires_grad_()
    eager_out = flashattn.flash_attn_func(ql, k, v, causal=True)
    (eager_dq,) = torch.autograd.grad(eager_out, (ql,), dout)
    assert fwd_op.calls == 0 and bwd_op.calls == 0
    assert torch.equal(direct, op_out.detach()) and torch.equal(eager_out.detach(), op_out.detach())
    assert torch.equal(eager_dq, op_dq)


@pytest.mark.parametrize("device", DEVICES)
def test_kvcache_call_bumps_the_cache_versions(device):
    require_device(device)
    dtype = _dtype(device)
    gen = torch.Generator().manual_seed(3)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    k_cache, v_cache = rand(2, 64, 2, 64), rand(2, 64, 2, 64)
    q, k, v = rand(2, 1, 4, 64), rand(2, 1, 2, 64), rand(2, 1, 2, 64)
    seqlens = torch.tensor([5, 17], dtype=torch.int32, device=device)
    before = (k_cache._version, v_cache._version)
    flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens)
    assert k_cache._version > before[0] and v_cache._version > before[1]
    assert torch.equal(k_cache[0, 5], k[0, 0]) and torch.equal(v_cache[1, 17], v[1, 0])
    # Serving engines run under inference_mode, whose tensors have no version counter.
    with torch.inference_mode():
        ik, iv = k_cache.clone(), v_cache.clone()
        out = flashattn.flash_attn_with_kvcache(q, ik, iv, k, v, cache_seqlens=seqlens + 1)
    assert torch.equal(ik[0, 6], k[0, 0]) and out.shape == q.shape


@pytest.mark.parametrize("device", DEVICES)
def test_strided_views_read_like_their_contiguous_copies(device):
    require_device(device)
    q, k, v = _qkv(device, sq=40, sk=40)
    # (B, H, S, D) storage seen as (B, S, H, D), and a slice that starts inside its storage.
    q_view = q.transpose(1, 2).contiguous().transpose(1, 2)[:, 3:]
    k_view = torch.cat([k, k], dim=2)[:, :, 1:3]
    assert q_view.storage_offset() > 0 and k_view.storage_offset() > 0
    got, lse, _ = flashattn.forward(q_view, k_view, v, causal=True)
    want, want_lse, _ = flashattn.forward(q_view.contiguous(), k_view.contiguous(), v, causal=True)
    assert torch.equal(got, want) and torch.equal(lse, want_lse)
    # Read directly, not through DLPack: torch refuses to export a tensor that requires grad.
    out = torch.empty_like(q_view)
    _C.fwd(q_view.detach().requires_grad_(), k_view, v, out, causal=True)
    assert torch.equal(out, want)


@pytest.mark.parametrize("device", DEVICES)
def test_arrays_the_direct_reader_declines_still_go_through_dlpack(device):
    require_device(device)
    q, k, v = _qkv(device)
    out, want = torch.empty_like(q), torch.empty_like(q)
    _C.fwd(q, k, v, want)
    # A subclass (what tracing and fake tensors are) is exported through DLPack.
    _C.fwd(torch.nn.Parameter(q, requires_grad=False), k, v, out)
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="q: expected dtype f32, f16 or bf16, got f64"):
        _C.fwd(q.double(), k, v, out)
    with pytest.raises((TypeError, ValueError)):
        _C.fwd(torch.empty(q.shape, device="meta", dtype=q.dtype), k, v, out)
