"""flash_attn_varlen_func over a paged K/V cache (block_table) and with seqused_k, as vLLM calls it for
prefill, chunked prefill and decode: numpy and torch arrays against the float64 reference on the same keys
stored contiguously; head dims that are not multiples of 8 through the numpy path. Forward only, as in
flash-attn."""

import numpy as np
import pytest
from attention_reference import attention
from numpy_support import ATOL, LSE_ATOL, assert_close, cu_seqlens, f64, randn

import flashattn


def paged(k, v, lengths, page_size, rng, spare_blocks=2):
    """k/v (total, Hk, D) of sequences `lengths` scattered into pages of a cache (num_blocks, page_size, Hk,
    D) in shuffled block order; unused rows are NaN (read one and the output shows it), table entries
    past a sequence's pages are -1 (never read)."""
    pages = [-(-n // page_size) for n in lengths]
    num_blocks = sum(pages) + spare_blocks
    order = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((len(lengths), max(pages) + 1), -1, np.int32)
    k_cache = np.full((num_blocks, page_size) + k.shape[1:], np.nan, k.dtype)
    v_cache = np.full_like(k_cache, np.nan)
    cu, used = cu_seqlens(lengths), 0
    for b, n in enumerate(lengths):
        table[b, : pages[b]] = order[used : used + pages[b]]
        used += pages[b]
        for j in range(n):
            blk, row = table[b, j // page_size], j % page_size
            k_cache[blk, row] = k[cu[b] + j]
            v_cache[blk, row] = v[cu[b] + j]
    return k_cache, v_cache, table


def case(rng, lq, lk, heads=4, heads_k=2, dim=32, dtype="float32"):
    q = randn(rng, (sum(lq), heads, dim), dtype)
    k = randn(rng, (sum(lk), heads_k, dim), dtype)
    v = randn(rng, (sum(lk), heads_k, dim), dtype)
    return q, k, v


def reference(q, k, v, lq, lk, **options):
    return attention(f64(q), f64(k), f64(v), cu_seqlens_q=cu_seqlens(lq), cu_seqlens_k=cu_seqlens(lk),
                     scale=options.get("softmax_scale"), causal=options.get("causal", False),
                     window=options.get("window_size", (-1, -1)), softcap=options.get("softcap", 0.0),
                     alibi=options.get("alibi_slopes"))


LQ, LK = [5, 0, 17, 1, 12], [7, 3, 17, 30, 20]
OPTIONS = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window_softcap": dict(window_size=(3, 1), softcap=4.0),
    "causal_alibi_scale": dict(causal=True, alibi_slopes="batch_heads", softmax_scale=0.3),
}


@pytest.mark.parametrize("page_size", [1, 3, 16, 256])
@pytest.mark.parametrize("name", OPTIONS)
def test_paged_matches_contiguous_reference(name, page_size):
    rng = np.random.default_rng(page_size)
    q, k, v = case(rng, LQ, LK)
    options = dict(OPTIONS[name])
    if options.get("alibi_slopes") == "batch_heads":
        options["alibi_slopes"] = rng.uniform(0.05, 0.5, (len(LQ), 4)).astype(np.float32)
    k_cache, v_cache, table = paged(k, v, LK, page_size, rng)
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens(LQ), cu_seqlens(LK), max(LQ),
                                                   max(LK), return_attn_probs=True, block_table=table, **options)
    ref_out, ref_lse = reference(q, k, v, LQ, LK, **options)
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")


@pytest.mark.parametrize("page_size", [None, 16])
def test_seqused_k_attends_to_the_used_keys_only(page_size):
    """cu_seqlens_k spans two extra (NaN) keys per sequence; seqused_k says which keys count, and the causal
    mask aligns to that count."""
    rng = np.random.default_rng(3)
    q, k, v = case(rng, LQ, LK)
    spans = [n + 2 for n in LK]
    k_long = np.full((sum(spans),) + k.shape[1:], np.nan, np.float32)
    v_long = np.full_like(k_long, np.nan)
    cu, cu_long = cu_seqlens(LK), cu_seqlens(spans)
    for b, n in enumerate(LK):
        k_long[cu_long[b] : cu_long[b] + n] = k[cu[b] : cu[b] + n]
        v_long[cu_long[b] : cu_long[b] + n] = v[cu[b] : cu[b] + n]
    kw = dict(seqused_k=np.asarray(LK, np.int32), causal=True, return_attn_probs=True)
    if page_size:
        k_cache, v_cache, table = paged(k_long, v_long, spans, page_size, rng)
        out, lse, _ = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens(LQ), cu_long, max(LQ),
                                                       max(spans), block_table=table, **kw)
    else:
        out, lse, _ = flashattn.flash_attn_varlen_func(q, k_long, v_long, cu_seqlens(LQ), cu_long, max(LQ),
                                                       max(spans), **kw)
    ref_out, ref_lse = reference(q, k, v, LQ, LK, causal=True)
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")


def test_chunked_prefill_mixes_decode_steps_and_long_prefills():
    """vLLM's chunked prefill: one-token decode steps against long contexts next to a 1k-token prefill,
    GQA, paged (page 16), bfloat16."""
    rng = np.random.default_rng(4)
    lq, lk = [1, 1024, 1, 37], [900, 1024, 1500, 600]
    q, k, v = case(rng, lq, lk, heads=8, heads_k=2, dim=64, dtype="bfloat16")
    k_cache, v_cache, table = paged(k, v, lk, 16, rng)
    out = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens(lq), cu_seqlens(lk), max(lq), max(lk),
                                           causal=True, block_table=table, seqused_k=np.asarray(lk, np.int32))
    ref_out, _ = reference(q, k, v, lq, lk, causal=True)
    assert_close(out, ref_out, ATOL["bfloat16"], "out")


@pytest.mark.parametrize("dim", [1, 5, 59, 111, 255])
def test_odd_head_dims(dim):
    rng = np.random.default_rng(dim)
    q, k, v = case(rng, LQ, LK, dim=dim)
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k, v, cu_seqlens(LQ), cu_seqlens(LK), max(LQ), max(LK),
                                                   causal=True, return_attn_probs=True)
    ref_out, ref_lse = reference(q, k, v, LQ, LK, causal=True)  # default scale 1/sqrt(dim)
    assert out.shape == q.shape
    assert_close(out, ref_out, ATOL["float32"], "out")
    assert_close(lse, ref_lse, LSE_ATOL["float32"], "softmax_lse")
    k_cache, v_cache, table = paged(k, v, LK, 7, rng)
    paged_out = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens(LQ), cu_seqlens(LK), max(LQ),
                                                 max(LK), causal=True, block_table=table)
    assert_close(paged_out, ref_out, ATOL["float32"], "paged out")


def test_bad_block_table_names_the_argument():
    rng = np.random.default_rng(5)
    q, k, v = case(rng, LQ, LK)
    k_cache, v_cache, table = paged(k, v, LK, 4, rng)
    with pytest.raises(ValueError, match=r"block_table: expected shape \[5, max_blocks_per_seq\]"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens(LQ), cu_seqlens(LK), max(LQ), max(LK),
                                         block_table=table[:3])
    table[2, 0] = k_cache.shape[0]
    with pytest.raises(ValueError, match=r"block_table\[2\]\[0\]: expected a block index"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens(LQ), cu_seqlens(LK), max(LQ), max(LK),
                                         block_table=table)


def test_torch_paged_forward_and_no_gradient():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    q, k, v = case(rng, LQ, LK)
    k_cache, v_cache, table = paged(k, v, LK, 16, rng)
    tq = torch.from_numpy(q).requires_grad_()
    args = (torch.from_numpy(k_cache), torch.from_numpy(v_cache), torch.from_numpy(cu_seqlens(LQ)),
            torch.from_numpy(cu_seqlens(LK)), max(LQ), max(LK))
    kw = dict(causal=True, block_table=torch.from_numpy(table), seqused_k=torch.tensor(LK, dtype=torch.int32))
    with torch.no_grad():
        out = flashattn.flash_attn_varlen_func(tq, *args, **kw)
    ref_out, _ = reference(q, k, v, LQ, LK, causal=True)
    assert_close(out.numpy(), ref_out, ATOL["float32"], "out")
    # Through the custom op (as torch.compile sees it) the result is the same.
    op_out, _ = torch.ops.flashattn.fwd_paged(tq.detach(), args[0], args[1], args[2], args[3], kw["block_table"],
                                              kw["seqused_k"], max(LQ), max(LK), 0.0, None, True, -1, -1, 0.0,
                                              None, None)
    assert torch.equal(op_out, out)
    # The op's schema and fake implementation hold under opcheck, and torch.compile traces it as one op.
    op_args = (tq.detach(), args[0], args[1], args[2], args[3], kw["block_table"], kw["seqused_k"], max(LQ), max(LK),
               0.0, None, True, -1, -1, 0.0, None, None)
    torch.library.opcheck(torch.ops.flashattn.fwd_paged.default, op_args,
                          test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda *a: flashattn.flash_attn_varlen_func(*a, **kw), fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(tq.detach(), *args), out)
    # With gradients recorded the forward runs; the backward says it does not exist (as flash-attn's).
    out = flashattn.flash_attn_varlen_func(tq, *args, **kw)
    with pytest.raises(NotImplementedError, match="block_table / seqused_k"):
        out.sum().backward()
