"""torch tensors through the flash-attn API: forward and gradients against the float64 reference under
flash-attn's criterion, on CUDA (and on CPU through the CPU backends); dropout replay; the custom ops
under torch.library.opcheck and torch.compile(fullgraph=True). Needs torch (`make test` installs it)."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attention_reference import attention, attention_backward  # noqa: E402
from torch_support import (  # noqa: E402
    DTYPE_NAMES,
    dropout_keep_tensor,
    naive_attention,
    require_device,
    require_support,
    to_numpy,
    within_criterion,
)

import flashattn  # noqa: E402
import flashattn._torch_ops  # noqa: E402,F401  (registers torch.ops.flashattn.*; flash_attn_func imports it lazily)

CASES = {
    "plain_d64": dict(b=2, sq=128, sk=128, h=4, hk=4, d=64),
    "causal_d128_gqa": dict(b=2, sq=200, sk=200, h=8, hk=2, d=128, causal=True),
    "causal_sq_lt_sk_d256": dict(b=1, sq=97, sk=301, h=2, hk=1, d=256, causal=True),
    "causal_sq_gt_sk": dict(b=2, sq=150, sk=70, h=4, hk=4, d=64, causal=True),
    "window_softcap": dict(b=2, sq=160, sk=160, h=4, hk=2, d=64, window=(32, 8), softcap=30.0),
    "alibi_scale": dict(b=2, sq=96, sk=144, h=4, hk=4, d=96, alibi=True, scale=0.2, causal=True),
    "mqa_d32": dict(b=3, sq=65, sk=257, h=8, hk=1, d=32),
    # head dims that are not multiples of 8: native on the CPU backends, padded inside the library on CUDA
    "odd_d59_gqa_causal": dict(b=2, sq=45, sk=70, h=4, hk=2, d=59, causal=True),
    "odd_d111_window": dict(b=1, sq=33, sk=40, h=2, hk=1, d=111, window=(8, 4)),
    "odd_d1": dict(b=1, sq=9, sk=12, h=2, hk=2, d=1),
}

# softmax_lse is float32 whatever the inputs; kernels compute it with exp2/log2 in float32 whose error
# exceeds a few float32 ulps of the naive float32 logsumexp.
LSE_FLOOR = 1e-4

DEVICE_DTYPES = [
    ("cuda", torch.bfloat16),
    ("cuda", torch.float16),
    ("cuda", torch.float32),
    ("cpu", torch.float32),
    ("cpu", torch.bfloat16),
]


def make_case(case, device, dtype, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype).requires_grad_()

    q = rand(case["b"], case["sq"], case["h"], case["d"])
    k = rand(case["b"], case["sk"], case["hk"], case["d"])
    v = rand(case["b"], case["sk"], case["hk"], case["d"])
    alibi = None
    if case.get("alibi"):
        alibi = (torch.rand(case["h"], generator=gen) * 0.3 + 0.05).to(device=device, dtype=torch.float32)
    options = dict(
        softmax_scale=case.get("scale"),
        causal=case.get("causal", False),
        window_size=case.get("window", (-1, -1)),
        softcap=case.get("softcap", 0.0),
        alibi_slopes=alibi,
    )
    return q, k, v, options


def reference_kwargs(options):
    return dict(
        scale=options["softmax_scale"],
        causal=options["causal"],
        window=options["window_size"],
        softcap=options["softcap"],
        alibi=to_numpy(options["alibi_slopes"]),
    )


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=[f"{d}-{DTYPE_NAMES[t]}" for d, t in DEVICE_DTYPES])
@pytest.mark.parametrize("name", CASES)
def test_forward_and_gradients_match_fp64(name, device, dtype):
    require_device(device)
    q, k, v, options = make_case(CASES[name], device, dtype)
    require_support(flashattn.query_backends(q, k, v, direction="backward", **options))

    out, lse, probs = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **options)
    assert probs is None and out.dtype == dtype and out.device == q.device
    dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)

    ref_out, ref_lse = attention(to_numpy(q), to_numpy(k), to_numpy(v), **reference_kwargs(options))
    ref_grads = attention_backward(to_numpy(dout), to_numpy(q), to_numpy(k), to_numpy(v),
                                   **reference_kwargs(options))
    naive_out, naive_lse = naive_attention(q, k, v, **options)
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)

    within_criterion(out, ref_out, naive_out, dtype, "out")
    within_criterion(lse, ref_lse, naive_lse, torch.float32, "softmax_lse", floor=LSE_FLOOR)
    for got, ref, naive, label in zip((dq, dk, dv), ref_grads, naive_grads, ("dq", "dk", "dv")):
        within_criterion(got, ref, naive, dtype, label)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_varlen_forward_and_gradients(device):
    require_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    lq, lk = [37, 0, 128, 5, 64], [50, 9, 128, 77, 1]
    cu_q = torch.tensor([0, *itertools.accumulate(lq)], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, *itertools.accumulate(lk)], dtype=torch.int32, device=device)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(sum(lq), 6, 64, generator=gen).to(device, dtype).requires_grad_()
    k = torch.randn(sum(lk), 2, 64, generator=gen).to(device, dtype).requires_grad_()
    v = torch.randn(sum(lk), 2, 64, generator=gen).to(device, dtype).requires_grad_()
    options = dict(causal=True, window_size=(40, -1), softcap=20.0)
    require_support(flashattn.query_backends(q, k, v, direction="backward", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                             max_seqlen_q=max(lq), max_seqlen_k=max(lk), **options))
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), return_attn_probs=True,
                                                   **options)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)

    kw = dict(cu_seqlens_q=cu_q.cpu().numpy(), cu_seqlens_k=cu_k.cpu().numpy(), causal=True, window=(40, -1),
              softcap=20.0)
    ref_out, ref_lse = attention(to_numpy(q), to_numpy(k), to_numpy(v), **kw)
    ref_grads = attention_backward(to_numpy(dout), to_numpy(q), to_numpy(k), to_numpy(v), **kw)
    # The naive baseline, sequence by sequence.
    naive_outs, naive_lses = [], []
    for b in range(len(lq)):
        qs, ks, vs = q[cu_q[b] : cu_q[b + 1]], k[cu_k[b] : cu_k[b + 1]], v[cu_k[b] : cu_k[b + 1]]
        o, l = naive_attention(qs[None], ks[None], vs[None], **options)
        naive_outs.append(o[0])
        naive_lses.append(l[0])
    naive_out = torch.cat(naive_outs)
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)
    within_criterion(out, ref_out, naive_out, dtype, "out")
    within_criterion(lse, ref_lse, torch.cat(naive_lses, dim=1), torch.float32, "softmax_lse", floor=LSE_FLOOR)
    for got, ref, naive, label in zip(grads, ref_grads, naive_grads, ("dq", "dk", "dv")):
        within_criterion(got, ref, naive, dtype, label)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_packed_variants_match_unpacked_and_route_gradients(device):
    require_device(device)
    dtype = torch.float16 if device == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(2)
    qkv = torch.randn(2, 96, 3, 4, 64, generator=gen).to(device, dtype).requires_grad_()
    require_support(flashattn.query_backends(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], direction="backward",
                                             causal=True))
    packed = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_() for i in range(3))
    unpacked = flashattn.flash_attn_func(q, k, v, causal=True)
    # Same values through differently strided views: equal up to the order of floating-point atomics.
    close = dict(rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(packed, unpacked, **close)
    dout = torch.randn_like(packed)
    (dqkv,) = torch.autograd.grad(packed, qkv, dout)
    grads = torch.autograd.grad(unpacked, (q, k, v), dout)
    for i, g in enumerate(grads):
        torch.testing.assert_close(dqkv[:, :, i], g, **close)

    kv = qkv[:, :, 1:]
    torch.testing.assert_close(flashattn.flash_attn_kvpacked_func(qkv[:, :, 0], kv, causal=True), unpacked, **close)
    rows = qkv.reshape(-1, 3, 4, 64)
    cu = torch.tensor([0, 96, 192], dtype=torch.int32, device=device)
    varlen = flashattn.flash_attn_varlen_qkvpacked_func(rows, cu, 96, causal=True)
    torch.testing.assert_close(varlen.reshape(2, 96, 4, 64), unpacked, **close)
    varlen_kv = flashattn.flash_attn_varlen_kvpacked_func(rows[:, 0], rows[:, 1:], cu, cu, 96, 96, causal=True)
    torch.testing.assert_close(varlen_kv.reshape(2, 96, 4, 64), unpacked, **close)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_dropout_replays_the_documented_mask(device):
    require_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    p = 0.17
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 80, 4, 64, generator=gen).to(device, dtype).requires_grad_() for _ in range(3))
    require_support(flashattn.query_backends(q, k, v, direction="backward", dropout_p=p, causal=True))
    # flash_attn_func draws its seed with one torch.randint on torch's default (CPU) generator.
    torch.manual_seed(1234)
    seed = int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())
    torch.manual_seed(1234)
    out = flashattn.flash_attn_func(q, k, v, dropout_p=p, causal=True)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)

    keep = dropout_keep_tensor(seed, 0, p, 2, 4, 80, 80, device)
    kw = dict(causal=True, dropout=(p, seed, 0))
    ref_out, _ = attention(to_numpy(q), to_numpy(k), to_numpy(v), **kw)
    ref_grads = attention_backward(to_numpy(dout), to_numpy(q), to_numpy(k), to_numpy(v), **kw)
    naive_out, _ = naive_attention(q, k, v, causal=True, dropout_keep=keep, dropout_p=p)
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)
    within_criterion(out, ref_out, naive_out, dtype, "out")
    for got, ref, naive, label in zip(grads, ref_grads, naive_grads, ("dq", "dk", "dv")):
        within_criterion(got, ref, naive, dtype, label)

    # The low-level forward takes the state explicitly and reproduces the same output.
    again, _, state = flashattn.forward(q.detach(), k.detach(), v.detach(), dropout_p=p, causal=True,
                                        rng_state=(seed, 0))
    assert state == (seed, 0) and torch.equal(again, out.detach())


def _cuda_or_skip(dtype=torch.bfloat16):
    require_device("cuda")
    q = torch.randn(2, 64, 4, 64, device="cuda", dtype=dtype)
    require_support(flashattn.query_backends(q, q, q, direction="backward", causal=True))
    return q


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_opcheck_custom_ops(device):
    if device == "cuda":
        _cuda_or_skip()
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 64, 4, 64, generator=gen).to(device, torch.bfloat16).requires_grad_()
               for _ in range(3))
    fwd_args = (q, k, v, None, None, 0, 0, 0.0, None, True, -1, -1, 0.0, None, None, False)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, fwd_args)
    out, lse = torch.ops.flashattn.fwd(*fwd_args)
    # The backward op has no autograd formula of its own (no double backward, as in flash-attn): its
    # inputs are plain tensors, as autograd hands them to it.
    bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), None, None,
                0, 0, 0.0, None, True, -1, -1, 0.0, None, None, False)
    torch.library.opcheck(torch.ops.flashattn.bwd.default, bwd_args)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_out_is_contiguous_for_transposed_inputs(device):
    """flash-attn allocates out as a fresh (B, S, H, D) tensor: out.view(B, S, H * D) works on outputs of
    (B, H, S, D) storage seen through transpose(1, 2), with and without gradients and compiled."""
    require_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 4, 33, 32, generator=gen).to(device, dtype).transpose(1, 2) for _ in range(3))
    require_support(flashattn.query_backends(q, k, v, causal=True))
    eager = flashattn.flash_attn_func(q, k, v, causal=True)
    assert eager.is_contiguous()
    with_grad = flashattn.flash_attn_func(q.detach().requires_grad_(), k, v, causal=True)
    assert with_grad.is_contiguous()
    with_grad.view(2, 33, -1).sum().backward()
    compiled = torch.compile(lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=True).view(2, 33, -1),
                             fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), eager.view(2, 33, -1))


def test_compile_fullgraph_forward_and_backward():
    _cuda_or_skip()
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 192, 8, 64, generator=gen).to("cuda", torch.bfloat16).requires_grad_()
               for _ in range(3))

    def block(q, k, v):
        out = flashattn.flash_attn_func(q * 1.5, k, v, causal=True, window_size=(64, 0))
        return (out.float() ** 2).sum()

    compiled = torch.compile(block, fullgraph=True)
    loss_c = compiled(q, k, v)
    grads_c = torch.autograd.grad(loss_c, (q, k, v))
    loss_e = block(q, k, v)
    grads_e = torch.autograd.grad(loss_e, (q, k, v))
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-3, atol=1e-3)
    for gc, ge in zip(grads_c, grads_e):
        torch.testing.assert_close(gc, ge, rtol=2e-2, atol=2e-2)


def test_compile_fullgraph_varlen_and_dropout():
    _cuda_or_skip()
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(300, 4, 64, generator=gen).to("cuda", torch.bfloat16).requires_grad_()
               for _ in range(3))
    cu = torch.tensor([0, 100, 250, 300], dtype=torch.int32, device="cuda")

    def block(q, k, v):
        out = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 150, 150, dropout_p=0.1, causal=True)
        return out.float().sum()

    loss = torch.compile(block, fullgraph=True)(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)


def test_runs_on_the_current_stream():
    q = _cuda_or_skip()
    source = q.repeat(4, 2, 1, 1)
    expected = flashattn.flash_attn_func(source, source, source, causal=True)
    inputs = torch.zeros_like(source)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()  # non-blocking: work on the legacy default stream would not wait for it
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # hold the side stream so that a kernel elsewhere would run first
        inputs.copy_(source)
        out = flashattn.flash_attn_func(inputs, inputs, inputs, causal=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


# Which slice of (batch, seqlen, heads, head_dim) tensors each empty call takes, for q and for k/v.
EMPTY_SLICES = {
    "batch": (np.s_[:0], np.s_[:0]),
    "heads": (np.s_[:, :, :0], np.s_[:, :, :0]),
    "queries": (np.s_[:, :0], np.s_[:]),
    "keys": (np.s_[:], np.s_[:, :0]),
}


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("dims", EMPTY_SLICES)
def test_empty_calls_return_empty_results_and_gradients(device, dims):
    """Empty calls behave as PyTorch SDPA's: empty (with no keys, zero) outputs of the right shapes and zero
    gradients of the inputs' shapes, for slices of real tensors (whatever strides those have)."""
    require_device(device)
    q_slice, kv_slice = EMPTY_SLICES[dims]
    q = torch.randn(2, 5, 4, 16, device=device)[q_slice].requires_grad_()
    k, v = (torch.randn(2, 7, 2, 16, device=device)[kv_slice].requires_grad_() for _ in range(2))
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert out.shape == q.shape and bool((out == 0).all())
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and t.grad.shape == t.shape and bool((t.grad == 0).all())
