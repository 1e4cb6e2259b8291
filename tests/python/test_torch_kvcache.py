"""flash_attn_with_kvcache on torch tensors: against the float64 reference (paged, rotary, append), a
decode step captured in a CUDA graph and replayed, and torch.compile(fullgraph=True) of a step."""

import pytest

torch = pytest.importorskip("torch")

from attention_reference import kvcache_attention  # noqa: E402
from torch_support import require_device, require_support, to_numpy  # noqa: E402

import flashattn  # noqa: E402


def decode_inputs(device, dtype, batch=4, heads=8, heads_k=2, dim=128, capacity=512, page_size=None, new=1,
                  seed=0):  # fmt: skip
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    k_cache, v_cache = rand(batch, capacity, heads_k, dim), rand(batch, capacity, heads_k, dim)
    table = None
    if page_size is not None:
        blocks = capacity // page_size
        order = torch.randperm(batch * blocks, generator=gen)
        table = order.reshape(batch, blocks).to(device=device, dtype=torch.int32)
        pages_k = torch.empty(batch * blocks, page_size, heads_k, dim, device=device, dtype=dtype)
        pages_v = torch.empty_like(pages_k)
        pages_k[table.flatten().long()] = k_cache.reshape(batch * blocks, page_size, heads_k, dim)
        pages_v[table.flatten().long()] = v_cache.reshape(batch * blocks, page_size, heads_k, dim)
        k_cache, v_cache = pages_k, pages_v
    q = rand(batch, new, heads, dim)
    k, v = rand(batch, new, heads_k, dim), rand(batch, new, heads_k, dim)
    seqlens = torch.randint(0, capacity - new + 1, (batch,), generator=gen).to(device=device, dtype=torch.int32)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v, cache_seqlens=seqlens, block_table=table)


def check_against_reference(inputs, dtype, **options):
    args = {name: x for name, x in inputs.items()}
    before_k, before_v = to_numpy(args["k_cache"]), to_numpy(args["v_cache"])
    require_support(flashattn.query_backends_kvcache(**args, **options))
    out, lse = flashattn.flash_attn_with_kvcache(**args, return_softmax_lse=True, **options)
    ref_out, ref_lse, ref_k, ref_v = kvcache_attention(
        to_numpy(args["q"]), before_k, before_v, to_numpy(args["k"]), to_numpy(args["v"]),
        cache_seqlens=to_numpy(args["cache_seqlens"]).astype(int),
        block_table=None if args["block_table"] is None else args["block_table"].cpu().numpy(),
        rotary_cos=to_numpy(options.get("rotary_cos")), rotary_sin=to_numpy(options.get("rotary_sin")),
        rotary_interleaved=options.get("rotary_interleaved", True), causal=options.get("causal", False),
        window=options.get("window_size", (-1, -1)), softcap=options.get("softcap", 0.0),
    )  # fmt: skip
    tol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(out.double().cpu(), torch.from_numpy(ref_out), rtol=0, atol=tol)
    # The reference rotates q and k in float64; the kernels store rotated values in the dtype (as
    # flash-attn does), so rotary cases differ in the LSE by about one rounding of the scores.
    lse_tol = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 4e-3}[dtype]
    torch.testing.assert_close(lse.double().cpu(), torch.from_numpy(ref_lse), rtol=0, atol=lse_tol)
    # New tokens are stored exactly (rotated ones to within one rounding of the dtype).
    torch.testing.assert_close(args["k_cache"].double().cpu(), torch.from_numpy(ref_k), rtol=0, atol=tol)
    torch.testing.assert_close(args["v_cache"].double().cpu(), torch.from_numpy(ref_v), rtol=0, atol=0)


DEVICE_DTYPES = [("cuda", torch.bfloat16), ("cuda", torch.float16), ("cpu", torch.float32)]


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=["cuda-bf16", "cuda-fp16", "cpu-fp32"])
@pytest.mark.parametrize("page_size", [None, 16, 7])
def test_decode_append(device, dtype, page_size):
    require_device(device)
    inputs = decode_inputs(device, dtype, page_size=page_size, capacity=448 if page_size == 7 else 512)
    check_against_reference(inputs, dtype, causal=True)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=["cuda-bf16", "cuda-fp16", "cpu-fp32"])
@pytest.mark.parametrize("interleaved", [True, False])
def test_multi_token_append_with_rotary(device, dtype, interleaved):
    require_device(device)
    inputs = decode_inputs(device, dtype, new=6, page_size=16, seed=1)
    angles = torch.rand(512, 32, generator=torch.Generator().manual_seed(2)) * 6.28
    cos, sin = angles.cos().to(device, dtype), angles.sin().to(device, dtype)
    check_against_reference(inputs, dtype, causal=True, rotary_cos=cos, rotary_sin=sin,
                            rotary_interleaved=interleaved)  # fmt: skip


def _decode_step(state):
    return flashattn.flash_attn_with_kvcache(state["q"], state["k_cache"], state["v_cache"], state["k"], state["v"],
                                             cache_seqlens=state["cache_seqlens"], block_table=state["block_table"],
                                             causal=True)  # fmt: skip


def test_cuda_graph_capture_of_a_decode_step():
    require_device("cuda")
    state = decode_inputs("cuda", torch.bfloat16, page_size=16, seed=3)
    state["cache_seqlens"].clamp_(max=400)
    require_support(flashattn.query_backends_kvcache(**state, causal=True))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch recommends
        _decode_step(state)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _decode_step(state)

    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        # New token, new query, one position further: written into the captured input buffers.
        state["cache_seqlens"].add_(1)
        for name in ("q", "k", "v"):
            state[name].copy_(torch.randn(state[name].shape, generator=gen).to(state[name]))
        eager = {name: (x.clone() if isinstance(x, torch.Tensor) else x) for name, x in state.items()}
        graph.replay()
        expected = _decode_step(eager)
        torch.cuda.synchronize()
        torch.testing.assert_close(static_out, expected, rtol=0, atol=0)
        torch.testing.assert_close(state["k_cache"], eager["k_cache"], rtol=0, atol=0)
        torch.testing.assert_close(state["v_cache"], eager["v_cache"], rtol=0, atol=0)


def test_compile_fullgraph_decode_step_updates_the_cache():
    require_device("cuda")
    state = decode_inputs("cuda", torch.bfloat16, seed=5)
    require_support(flashattn.query_backends_kvcache(**state, causal=True))
    eager = {name: (x.clone() if isinstance(x, torch.Tensor) else x) for name, x in state.items()}
    compiled = torch.compile(_decode_step, fullgraph=True)
    out = compiled(state)
    expected = _decode_step(eager)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(state["k_cache"], eager["k_cache"], rtol=0, atol=0)
    torch.testing.assert_close(state["v_cache"], eager["v_cache"], rtol=0, atol=0)


def test_int_cache_seqlens_and_lse():
    require_device("cuda")
    state = decode_inputs("cuda", torch.bfloat16, seed=6)
    require_support(flashattn.query_backends_kvcache(state["q"], state["k_cache"], state["v_cache"],
                                                     cache_seqlens=300))  # fmt: skip
    out, lse = flashattn.flash_attn_with_kvcache(state["q"], state["k_cache"], state["v_cache"], cache_seqlens=300,
                                                 return_softmax_lse=True)  # fmt: skip
    ref_out, ref_lse, _, _ = kvcache_attention(to_numpy(state["q"]), to_numpy(state["k_cache"]),
                                               to_numpy(state["v_cache"]), cache_seqlens=300)  # fmt: skip
    torch.testing.assert_close(out.double().cpu(), torch.from_numpy(ref_out), rtol=0, atol=3e-2)
    torch.testing.assert_close(lse.double().cpu(), torch.from_numpy(ref_lse), rtol=0, atol=1e-3)


def test_split_scratch_memory_comes_from_torch():
    """The GPU kernels' scratch memory (split partials) is taken from torch's caching allocator on the
    current stream: one allocation more than the call's outputs when the keys are split, none otherwise."""
    require_device("cuda")
    state = decode_inputs("cuda", torch.bfloat16, seed=6)
    require_support(flashattn.query_backends_kvcache(**state, causal=True))
    if not any(b["chosen"] and b["name"] == "cuda_decode" for b in flashattn.query_backends_kvcache(**state)):
        pytest.skip("cuda_decode does not run this call")
    args = dict(cache_seqlens=state["cache_seqlens"], block_table=state["block_table"], causal=True)

    def allocations(num_splits):
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        out = flashattn.flash_attn_with_kvcache(state["q"], state["k_cache"], state["v_cache"],
                                                num_splits=num_splits, **args)  # fmt: skip
        torch.cuda.synchronize()
        return torch.cuda.memory_stats()["allocation.all.allocated"] - before, out

    whole, out_whole = allocations(1)
    split, out_split = allocations(8)
    assert split == whole + 1
    torch.testing.assert_close(out_split, out_whole, rtol=1e-2, atol=1e-2)


# Bad index values (docs/reliability.md): named errors on the CPU (always) and on CUDA with the check mode
# (the keyword or FLASHATTN_CHECK_INDEX_VALUES=1); without it, CUDA clamps them and the next call is right.
@pytest.mark.parametrize("device,dtype", [("cuda", torch.bfloat16), ("cpu", torch.float32)], ids=["cuda", "cpu"])
@pytest.mark.parametrize("how", ["keyword", "env"])
def test_bad_block_table_is_named(device, dtype, how, monkeypatch):
    require_device(device)
    state = decode_inputs(device, dtype, batch=3, dim=64, capacity=64, page_size=16, seed=7)
    state["cache_seqlens"][1] = 64  # + 1 new key: past 4 pages of 16, a block table too short (flash-attn's name)
    options = {}
    if how == "keyword":
        options["check_index_values"] = True
    else:
        monkeypatch.setenv("FLASHATTN_CHECK_INDEX_VALUES", "1")
    with pytest.raises(ValueError, match=r"block_table\[1\]: expected enough pages"):
        flashattn.flash_attn_with_kvcache(**state, **options)
    state["block_table"][2, 0] = 10**6  # a page past the pool
    state["cache_seqlens"][1] = 3
    with pytest.raises(ValueError, match=r"block_table\[2\]\[0\]: expected a block index in \[0, 12\), got 1000000"):
        flashattn.flash_attn_with_kvcache(**state, **options)


def test_bad_values_on_cuda_are_clamped_without_the_check_mode():
    require_device("cuda")
    state = decode_inputs("cuda", torch.bfloat16, batch=3, dim=64, capacity=64, page_size=16, seed=8)
    bad = {name: (x.clone() if isinstance(x, torch.Tensor) else x) for name, x in state.items()}
    bad["cache_seqlens"][1] = 2**31 - 1
    bad["block_table"][0, 0] = -(2**31)
    flashattn.flash_attn_with_kvcache(**bad)
    torch.cuda.synchronize()  # the context survived: no illegal address
    check_against_reference(state, torch.bfloat16)
