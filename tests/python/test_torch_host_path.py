"""The torch path's host side: how tensors reach the native module, outputs it allocates, the KV-cache ops'
declared mutations (what torch.compile sees), and no host synchronisation in any torch path.

The CPU tests run wherever torch is installed; the CUDA ones (the sync check, a reduce-overhead CUDA graph)
skip without a GPU and are meant for the GPU machine."""

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
from torch_support import require_device  # noqa: E402

import flashattn  # noqa: E402
import flashattn._torch_ops  # noqa: E402,F401  (registers the ops)
from flashattn import _C  # noqa: E402

EXCHANGE = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
needs_exchange = pytest.mark.skipif(not EXCHANGE, reason="this torch has no DLPack C exchange API (torch < 2.10)")


def _qkv(device, dtype, b=2, sq=5, sk=37, h=4, hk=2, d=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, s, x, d, generator=gen).to(device, dtype) for s, x in ((sq, h), (sk, hk), (sk, hk))]


@needs_exchange
def test_plain_tensors_are_read_through_the_exchange_api():
    q = torch.randn(2, 3, 4, 8)
    views = (q, q.clone().requires_grad_(), q.transpose(1, 2), q[..., ::2], q[1:])
    assert _C._read_arrays(*views) == ["exchange"] * len(views)
    # A subclass and another framework's array take the DLPack path.
    assert _C._read_arrays(torch.nn.Parameter(q), np.zeros(3, np.float32)) == ["ndarray", "ndarray"]
    # A tensor with the negative bit holds its values' negations; the exchange API and torch's __dlpack__ both
    # describe the memory, so no path may read it: the call matches no signature instead of computing with
    # negated values.
    for negative in (torch.randn(4, 8, dtype=torch.complex64).conj().imag, torch._neg_view(q)):
        assert negative.is_neg() and _C._read_arrays(negative) == ["none"]
    with pytest.raises(TypeError):
        _C.fwd(q, q, torch._neg_view(q), torch.empty_like(q))


@needs_exchange
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_native_calls_allocate_outputs_like_the_caller(device):
    require_device(device)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = _qkv(device, dtype)
    out, lse = torch.empty_like(q), torch.empty(2, 4, 5, device=device)
    assert _C.fwd(q, k, v, out, lse, causal=True) is None
    got_out, got_lse = _C.fwd(q, k, v, None, causal=True)
    assert got_out.is_contiguous() and got_out.dtype == q.dtype and got_out.device == q.device
    assert got_lse.shape == (2, 4, 5) and got_lse.dtype == torch.float32
    assert torch.equal(got_out, out) and torch.equal(got_lse, lse)
    # Varlen: softmax_lse is (heads, total_q).
    cu = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    vout, vlse = _C.fwd(q[0], k[0], v[0], None, None, cu, torch.tensor([0, 20, 37], dtype=torch.int32, device=device),
                        3, 20)  # fmt: skip
    assert vout.shape == q[0].shape and vlse.shape == (4, 5)
    # The KV-cache call too.
    kv_out, kv_lse = _C.fwd_kvcache(q, k, v, None, cache_seqlens_scalar=30)
    assert kv_out.shape == q.shape and kv_lse.shape == (2, 4, 5)


def test_arrays_without_a_framework_allocator_must_pass_outputs():
    q = np.zeros((1, 4, 2, 8), np.float32)
    with pytest.raises(ValueError, match="flashattn::forward: out: expected an array, got None"):
        _C.fwd(q, q, q, None)


def _decode_state(device, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device, dtype)

    return dict(q=rand(3, 1, 4, 32), k_cache=rand(3, 40, 2, 32), v_cache=rand(3, 40, 2, 32), k=rand(3, 1, 2, 32),
                v=rand(3, 1, 2, 32), cache_seqlens=torch.tensor([3, 17, 30], dtype=torch.int32, device=device))


def _read_step(s):
    return flashattn.flash_attn_with_kvcache(s["q"], s["k_cache"], s["v_cache"], cache_seqlens=s["cache_seqlens"])


def _append_step(s):
    return flashattn.flash_attn_with_kvcache(s["q"], s["k_cache"], s["v_cache"], s["k"], s["v"],
                                             cache_seqlens=s["cache_seqlens"], causal=True)  # fmt: skip


def test_only_the_appending_kvcache_op_declares_mutated_caches():
    def written(op):
        return {a.name for a in op.default._schema.arguments if a.alias_info is not None and a.alias_info.is_write}

    assert written(torch.ops.flashattn.fwd_kvcache) == set()
    assert "k" not in {a.name for a in torch.ops.flashattn.fwd_kvcache.default._schema.arguments}
    assert written(torch.ops.flashattn.fwd_kvcache_append) == {"k_cache", "v_cache"}


def _compiled_graph(step, state):
    """(result, the ATen-level forward graph torch.compile makes of step(state)) with an eager backend."""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    result = torch.compile(step, backend=aot_autograd(fw_compiler=record), fullgraph=True)(state)
    assert len(graphs) == 1
    return result, str(graphs[0].graph)


def test_compiled_read_only_decode_step_mutates_nothing():
    state = _decode_state("cpu", torch.float32)
    caches = (state["k_cache"].clone(), state["v_cache"].clone())
    with torch.no_grad():
        expected = _read_step(state)
        out, graph = _compiled_graph(_read_step, state)
    assert "flashattn.fwd_kvcache.default" in graph, graph
    # A declared mutation would be functionalised (auto_functionalized) and the caches returned by the graph
    # to be written back: neither here, so a CUDA-graph backend has no mutated input to refuse.
    assert "auto_functionalized" not in graph and "copy_" not in graph, graph
    assert torch.equal(out, expected)
    assert torch.equal(state["k_cache"], caches[0]) and torch.equal(state["v_cache"], caches[1])


def test_compiled_appending_decode_step_writes_the_caches():
    state = _decode_state("cpu", torch.float32, seed=1)
    eager = {name: x.clone() for name, x in state.items()}
    with torch.no_grad():
        expected = _append_step(eager)
        out, graph = _compiled_graph(_append_step, state)
    # The mutation is functionalised: the op runs on the caches' bases and the written caches are outputs
    # of the graph, copied back by the runtime wrapper.
    assert "fwd_kvcache_append" in graph and "auto_functionalized" in graph, graph
    assert torch.equal(out, expected)
    assert torch.equal(state["k_cache"], eager["k_cache"]) and torch.equal(state["v_cache"], eager["v_cache"])


def test_reduce_overhead_captures_a_read_only_decode_step():
    require_device("cuda")
    from torch._dynamo.utils import counters

    state = _decode_state("cuda", torch.bfloat16, seed=2)
    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(_read_step, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(3):  # warm-up runs, then the recorded graph replays
            out = step(state)
        expected = _read_step(state)
    torch.cuda.synchronize()
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_torch_paths_do_not_synchronize_the_host():
    """Every torch call path, under torch.cuda.set_sync_debug_mode("error"): a call that waits for the GPU
    (a device-to-host copy, .item(), a synchronize) raises instead of passing silently."""
    require_device("cuda")
    q, k, v = _qkv("cuda", torch.bfloat16, sq=64, sk=64)
    qkv = torch.stack((q, q, q), dim=2)
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device="cuda")
    rows = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
    state = _decode_state("cuda", torch.bfloat16, seed=3)
    ql = q.clone().requires_grad_()

    def every_path():
        with torch.no_grad():
            flashattn.flash_attn_func(q, k, v, causal=True)
            flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
            flashattn.flash_attn_varlen_func(*rows, cu, cu, 64, 64, causal=True)
            _read_step(state)
            _append_step(state)
        out = flashattn.flash_attn_func(ql, k, v, causal=True)
        torch.autograd.grad(out, (ql,), torch.ones_like(out))
        transformers_attention()

    def transformers_attention():
        try:
            import flashattn.integrations.transformers as fa_hf
        except ImportError:
            return

        class Module(torch.nn.Module):
            is_causal = True

        with torch.no_grad():
            fa_hf.attention_forward(Module().eval(), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None)

    every_path()  # first calls: lazy initialisation of torch's own state is not what is checked
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        every_path()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()


def test_the_general_path_gives_the_one_call_path_results(monkeypatch):
    """Tensors the native module cannot read through the exchange API (subclasses; every tensor on a torch
    before 2.10) get outputs allocated in Python and an explicit stream: the same results."""
    import flashattn._torch_ops as torch_ops

    q, k, v = _qkv("cpu", torch.float32, sq=9, sk=21)
    state = _decode_state("cpu", torch.float32, seed=4)
    ql = q.clone().requires_grad_()

    def calls(s):
        out, lse, _ = flashattn.flash_attn_func(ql, k, v, causal=True, return_attn_probs=True)
        (dq,) = torch.autograd.grad(out, (ql,), torch.ones_like(out))
        with torch.no_grad():
            return out.detach(), lse, dq, _read_step(s), _append_step(s), s["k_cache"].clone()

    fast = calls({name: x.clone() for name, x in state.items()})
    monkeypatch.setattr(torch_ops, "_EXCHANGE", False)
    general = calls({name: x.clone() for name, x in state.items()})
    for a, b in zip(fast, general):
        assert torch.equal(a, b)
