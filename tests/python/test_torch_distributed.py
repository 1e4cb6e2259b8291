"""flashattn.distributed: ring attention over torch.distributed with autograd.

Worlds of 2 and 3 processes (torch.multiprocessing, gloo, CPU tensors) run every case once per world;
each case shards a random problem, runs the ring forward and backward, gathers out, softmax_lse and the
gradients, and checks them against the float64 reference under flash-attn's criterion (naive baseline in
the inputs' dtype). The processes of one world are spawned once for all cases; each test reads its case's
outcome. Also: a world of one in this process (gloo), a world of one on CUDA with NCCL, and (two or more
GPUs) a world of two with NCCL. Needs torch (skipped without it)."""

import datetime
import faulthandler
import itertools
import json
import os
import sys
import time
import traceback

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from attention_reference import attention, attention_backward  # noqa: E402
from torch_support import naive_attention, require_device, to_numpy, within_criterion  # noqa: E402

import flashattn  # noqa: E402
import flashattn.distributed as fd  # noqa: E402

# softmax_lse is float32 whatever the inputs (see test_torch_attention.py).
LSE_FLOOR = 1e-4
WORLDS = (2, 3)
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32

# Small shapes: every case runs in every world, forward and backward, plus the float64 reference.
# s: the global sequence length (dense); lengths: the global lengths of packed sequences (varlen).
CASES = {
    "zigzag_causal_gqa_bf16": dict(b=2, s=40, h=4, hk=2, d=32, dtype=BF16, causal=True),
    "zigzag_full_f32_uneven": dict(b=1, s=37, h=2, hk=2, d=32, dtype=F32),
    "zigzag_causal_window_f16": dict(b=1, s=45, h=4, hk=1, d=32, dtype=F16, causal=True, window=(9, -1)),
    "zigzag_window_softcap_bf16": dict(b=1, s=42, h=2, hk=1, d=64, dtype=BF16, window=(6, 4), softcap=15.0,
                                       scale=0.3),
    "contiguous_causal_gqa_bf16": dict(b=2, s=33, h=4, hk=2, d=32, dtype=BF16, causal=True, layout="contiguous"),
    "contiguous_window_f32": dict(b=1, s=30, h=2, hk=1, d=32, dtype=F32, window=(5, 2), layout="contiguous",
                                  deterministic=True),
    # Fewer positions than ranks: the last rank holds no rows at all (and chunks are empty).
    "empty_shard_zigzag_causal": dict(b=1, s="world-1", h=2, hk=1, d=32, dtype=BF16, causal=True),
    "empty_shard_contiguous_full": dict(b=1, s="world-1", h=2, hk=2, d=32, dtype=F32, layout="contiguous"),
    # The global length found by the ranks' agreement (seqlen=None) instead of given.
    "zigzag_causal_seqlen_agreed": dict(b=1, s=26, h=2, hk=2, d=32, dtype=BF16, causal=True, give_seqlen=False),
    "varlen_zigzag_causal_gqa_bf16": dict(lengths=[23, 5, 1, 0, 16], h=4, hk=2, d=32, dtype=BF16, causal=True),
    "varlen_contiguous_window_f32": dict(lengths=[13, 9, 2], h=2, hk=1, d=32, dtype=F32, window=(4, 3),
                                         layout="contiguous"),
    "varlen_zigzag_lengths_agreed_f16": dict(lengths=[17, 3], h=2, hk=2, d=32, dtype=F16, causal=True,
                                             give_seqlen=False),
}
# Checks that are not a comparison with the reference, run in the same worlds.
CHECKS = ("packed_variants", "errors", "errors_agreed", "shard_gather_roundtrip")


# ------------------------------------------------------------------------------------- one case


def _seqlen(case, world):
    return world - 1 if case.get("s") == "world-1" else case.get("s")


def _problem(case, world, seed):
    gen = torch.Generator().manual_seed(seed)
    dtype = case["dtype"]
    if "lengths" in case:
        total = sum(case["lengths"])
        shapes = ((total, case["h"], case["d"]), (total, case["hk"], case["d"]))
    else:
        s = _seqlen(case, world)
        shapes = ((case["b"], s, case["h"], case["d"]), (case["b"], s, case["hk"], case["d"]))
    q, k, v, dout = (torch.randn(*shapes[i], generator=gen).to(dtype) for i in (0, 1, 1, 0))
    return q, k, v, dout


def _options(case):
    return dict(softmax_scale=case.get("scale"), causal=case.get("causal", False),
                window_size=case.get("window", (-1, -1)), softcap=case.get("softcap", 0.0))


def _run_ring(case, world, q, k, v, dout, device):
    """The ring on this rank's shards; returns the gathered (out, lse, dq, dk, dv)."""
    layout = case.get("layout", "zigzag")
    opts = _options(case)
    give = case.get("give_seqlen", True)
    if "lengths" in case:
        cu = torch.tensor([0, *itertools.accumulate(case["lengths"])], dtype=torch.int32)
        local = [fd.shard(x, 0, cu_seqlens=cu, layout=layout).to(device) for x in (q, k, v, dout)]
        ql, kl, vl = (x.requires_grad_() for x in local[:3])
        cu_local = fd.shard_cu_seqlens(cu, layout=layout).to(device)
        out, lse, probs = fd.ring_flash_attn_varlen_func(
            ql, kl, vl, cu_local, None, return_attn_probs=True, deterministic=case.get("deterministic", False),
            layout=layout, global_seqlens=case["lengths"] if give else None, **opts)
        assert probs is None and lse.shape == (case["h"], ql.shape[0]) and out.shape == ql.shape
        gather = dict(cu_seqlens=cu, layout=layout)
        rows_dim, lse_dim = 0, 1
    else:
        s = q.shape[1]
        local = [fd.shard(x, 1, layout=layout).to(device) for x in (q, k, v, dout)]
        ql, kl, vl = (x.requires_grad_() for x in local[:3])
        out, lse, probs = fd.ring_flash_attn_func(
            ql, kl, vl, return_attn_probs=True, deterministic=case.get("deterministic", False), layout=layout,
            seqlen=s if give else None, **opts)
        assert probs is None and lse.shape == (q.shape[0], q.shape[2], ql.shape[1]) and out.shape == ql.shape
        gather = dict(seqlen=s if give else None, layout=layout)
        rows_dim, lse_dim = 1, 2
    assert out.dtype == q.dtype and lse.dtype == torch.float32
    grads = torch.autograd.grad(out, (ql, kl, vl), local[3])
    full = [fd.gather(x, rows_dim, **gather) for x in (out, *grads)]
    return full[0], fd.gather(lse, lse_dim, **gather), full[1:]


def _reference(case, q, k, v, dout):
    """(out, lse, grads) in float64 and the naive low-precision baseline of each."""
    opts = _options(case)
    ref_kw = dict(scale=opts["softmax_scale"], causal=opts["causal"], window=opts["window_size"],
                  softcap=opts["softcap"])
    qd, kd, vd = (x.detach().clone().requires_grad_() for x in (q, k, v))
    if "lengths" in case:
        cu = [0, *itertools.accumulate(case["lengths"])]
        ref_kw.update(cu_seqlens_q=cu, cu_seqlens_k=cu)
        outs, lses = [], []
        for a, b in zip(cu, cu[1:]):
            o, l = naive_attention(qd[a:b][None], kd[a:b][None], vd[a:b][None], **opts)
            outs.append(o[0])
            lses.append(l[0])
        naive_out, naive_lse = torch.cat(outs), torch.cat(lses, dim=1)
    else:
        naive_out, naive_lse = naive_attention(qd, kd, vd, **opts)
    ref_out, ref_lse = attention(to_numpy(q), to_numpy(k), to_numpy(v), **ref_kw)
    ref_grads = attention_backward(to_numpy(dout), to_numpy(q), to_numpy(k), to_numpy(v), **ref_kw)
    naive_grads = torch.autograd.grad(naive_out, (qd, kd, vd), dout, allow_unused=True)
    naive_grads = [torch.zeros_like(x) if g is None else g for g, x in zip(naive_grads, (qd, kd, vd))]
    return (ref_out, ref_lse, ref_grads), (naive_out, naive_lse, naive_grads)


class Unsupported(Exception):
    """No backend of this build implements the case's calls on this device (a skip, not a failure)."""


def _require_support(case, q, k, v, device):
    """Same decision on every rank: the full problem's backward on `device` must have a backend."""
    kw = dict(_options(case), direction="backward")
    if "lengths" in case:
        cu = torch.tensor([0, *itertools.accumulate(case["lengths"])], dtype=torch.int32, device=device)
        longest = max(case["lengths"])
        kw.update(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest)
    answers = flashattn.query_backends(q.to(device), k.to(device), v.to(device), **kw)
    if not any(a["supported"] for a in answers):
        raise Unsupported("; ".join(f"{a['name']}: {a['reason']}" for a in answers))


def check_case(name, world, rank, device):
    case = CASES[name]
    q, k, v, dout = _problem(case, world, seed=sorted(CASES).index(name))
    _require_support(case, q, k, v, device)
    out, lse, grads = _run_ring(case, world, q, k, v, dout, device)
    if rank != 0:
        return  # every rank holds the same gathered tensors; one of them compares
    (ref_out, ref_lse, ref_grads), (naive_out, naive_lse, naive_grads) = _reference(case, q, k, v, dout)
    dtype = case["dtype"]
    within_criterion(out, ref_out, naive_out, dtype, "out")
    within_criterion(lse, ref_lse, naive_lse, torch.float32, "softmax_lse", floor=LSE_FLOOR)
    for got, ref, naive, label in zip(grads, ref_grads, naive_grads, ("dq", "dk", "dv")):
        within_criterion(got, ref, naive, dtype, label)


# ------------------------------------------------------------------------------------- other checks


def _plain_dtype(device):
    """float32 on CPU; bfloat16 on CUDA, which every CUDA backend implements."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def check_packed_variants(world, rank, device):
    """The packed functions route to the unpacked one and their gradients reach the packed tensor."""
    gen = torch.Generator().manual_seed(7)
    dtype = _plain_dtype(device)
    # The same calls on the same values; CUDA backwards may add in a different order (atomics).
    s, close = 24, dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    qkv_full = torch.randn(2, s, 3, 2, 32, generator=gen).to(dtype)
    qkv = fd.shard(qkv_full, 1).to(device).requires_grad_()
    packed = fd.ring_flash_attn_qkvpacked_func(qkv, causal=True, seqlen=s)
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_() for i in range(3))
    plain = fd.ring_flash_attn_func(q, k, v, causal=True, seqlen=s)
    torch.testing.assert_close(packed, plain, **close)
    dout = torch.randn_like(plain)
    (dqkv,) = torch.autograd.grad(packed, qkv, dout)
    for i, g in enumerate(torch.autograd.grad(plain, (q, k, v), dout)):
        torch.testing.assert_close(dqkv[:, :, i], g, **close)
    torch.testing.assert_close(fd.ring_flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True, seqlen=s), plain,
                               **close)
    # Varlen packed: two sequences of s positions are the batch of two above.
    cu = torch.tensor([0, s, 2 * s], dtype=torch.int32)
    rows = fd.shard(qkv_full.reshape(2 * s, 3, 2, 32), 0, cu_seqlens=cu).to(device)
    cu_local = fd.shard_cu_seqlens(cu).to(device)
    varlen = fd.ring_flash_attn_varlen_qkvpacked_func(rows, cu_local, s, causal=True, global_seqlens=[s, s])
    torch.testing.assert_close(varlen, plain.reshape(-1, 2, 32), **close)
    varlen_kv = fd.ring_flash_attn_varlen_kvpacked_func(rows[:, 0], rows[:, 1:], cu_local, s, causal=True)
    torch.testing.assert_close(varlen_kv, plain.reshape(-1, 2, 32), **close)


def check_errors(world, rank, device):
    """Arguments refused before any transfer, identically on every rank (no rank is left waiting)."""
    s = 4 * world
    q = fd.shard(torch.randn(1, s, 2, 32), 1).to(device, _plain_dtype(device))
    cases = [
        (dict(dropout_p=0.1), "dropout_p: expected 0.0"),
        (dict(alibi_slopes=torch.ones(2, device=device)), "alibi_slopes: expected None"),
        (dict(layout="diagonal"), "layout: expected one of"),
        (dict(window_size=7), "window_size: expected a pair"),
    ]
    for seqlen in (s, None):  # locally (seqlen given) and through the agreement (seqlen None)
        for kwargs, message in cases:
            with pytest.raises(ValueError, match=message):
                fd.ring_flash_attn_func(q, q, q, seqlen=seqlen, **kwargs)
    # A global length every rank's shard disagrees with.
    with pytest.raises(ValueError, match=r"q: expected \d+ rows: rank \d's zigzag share of a sequence of"):
        fd.ring_flash_attn_func(q, q, q, seqlen=3 * s)
    with pytest.raises(ValueError, match=r"k: expected the rows of q"):
        fd.ring_flash_attn_func(q, q[:, :1], q, seqlen=s)
    with pytest.raises(ValueError, match="expected 4 dims"):
        fd.ring_flash_attn_func(q[0], q[0], q[0], seqlen=s)
    # Varlen: local cu_seqlens that are not the shards of the given global lengths.
    cu = torch.tensor([0, s], dtype=torch.int32)
    rows = fd.shard(torch.randn(s, 2, 32), 0, cu_seqlens=cu).to(device, _plain_dtype(device))
    with pytest.raises(ValueError, match=r"cu_seqlens: expected \[0, \d+\]: rank"):
        fd.ring_flash_attn_varlen_func(rows, rows, rows, [0, rows.shape[0]], global_seqlens=[2 * s])
    with pytest.raises(ValueError, match="cu_seqlens: expected local offsets ending at q's"):
        fd.ring_flash_attn_varlen_func(rows, rows, rows, [0, rows.shape[0] + 1], global_seqlens=[s])
    # The ring still works afterwards (nothing was left in flight).
    fd.ring_flash_attn_func(q, q, q, causal=True, seqlen=s)


def check_errors_agreed(world, rank, device):
    """With seqlen=None, a wrong argument on one rank makes every rank raise before any transfer."""
    s = 4 * world
    q = fd.shard(torch.randn(1, s, 2, 32), 1).to(device, _plain_dtype(device))
    bad = world - 1
    if rank == bad:
        with pytest.raises(ValueError, match="dropout_p: expected 0.0"):
            fd.ring_flash_attn_func(q, q, q, dropout_p=0.5)
    else:
        with pytest.raises(ValueError, match=f"rank {bad} rejected the call"):
            fd.ring_flash_attn_func(q, q, q)
    # Row counts that add up to no layout's split: rank 0 one row short, the last rank one row too many
    # (with two ranks, shards of 4 + 4 rows become 3 + 5 for a sequence of 8: zigzag wants 4 + 4).
    full = torch.randn(1, s, 2, 32)
    extra = fd.shard(full, 1).to(device, _plain_dtype(device))
    if rank == 0:
        extra = extra[:, 1:]
    elif rank == world - 1:
        extra = torch.cat((extra, extra[:, :1]), dim=1)
    with pytest.raises(ValueError, match=r"q: expected \d+ rows: rank"):
        fd.ring_flash_attn_func(extra, extra, extra)
    fd.ring_flash_attn_func(q, q, q, causal=True)


def check_shard_gather_roundtrip(world, rank, device):
    """shard/gather are inverse for both layouts, dense and varlen, for any length (empty chunks too),
    and agree with the C++ layout: zigzag rank r holds chunks r and 2N-1-r of 2N."""
    for layout, s in itertools.product(fd.LAYOUTS, (0, 1, world, 2 * world + 1, 19)):
        full = torch.arange(2 * s * 3, dtype=torch.float32).reshape(2, s, 3)
        local = fd.shard(full, 1, layout=layout).to(device)
        assert local.shape[1] == fd.shard_rows(s, world, rank, layout)
        torch.testing.assert_close(fd.gather(local, 1, layout=layout, seqlen=s).cpu(), full)
        torch.testing.assert_close(fd.gather(local, 1, layout=layout).cpu(), full)
        # lse-like (B, H, S): dim 2
        torch.testing.assert_close(fd.gather(fd.shard(full.transpose(1, 2), 2, layout=layout).to(device), 2,
                                             layout=layout, seqlen=s).cpu(), full.transpose(1, 2))
    s = 4 * world + 2
    chunks = torch.arange(s).tensor_split(2 * world)
    expected = torch.cat((chunks[rank], chunks[2 * world - 1 - rank]))
    torch.testing.assert_close(fd.zigzag_shard(torch.arange(s), 0), expected)
    torch.testing.assert_close(fd.contiguous_shard(torch.arange(s), 0), torch.arange(s).tensor_split(world)[rank])
    cu = torch.tensor([0, 5, 5, 12, 13], dtype=torch.int32)
    rows = torch.arange(13 * 2).reshape(13, 2)
    for layout in fd.LAYOUTS:
        local = fd.shard(rows, 0, cu_seqlens=cu, layout=layout).to(device)
        local_cu = fd.shard_cu_seqlens(cu, layout=layout)
        assert local_cu.dtype == torch.int32 and int(local_cu[-1]) == local.shape[0]
        torch.testing.assert_close(fd.gather(local, 0, cu_seqlens=cu, layout=layout).cpu(), rows)


CHECK_FUNCTIONS = {
    "packed_variants": check_packed_variants,
    "errors": check_errors,
    "errors_agreed": check_errors_agreed,
    "shard_gather_roundtrip": check_shard_gather_roundtrip,
}


# ------------------------------------------------------------------------------------- the worlds


def _worker(rank, world, backend, device_type, init_file, out_dir, names):
    """One rank: joins the group, runs every named case and check, writes {name: outcome} as JSON."""
    faulthandler.enable()  # an abort in a rank prints where it happened (the parent only sees the signal)
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    outcomes, status = {}, 1
    try:
        for name in names:
            try:
                if name in CASES:
                    check_case(name, world, rank, device)
                else:
                    CHECK_FUNCTIONS[name](world, rank, device)
                outcomes[name] = "ok"
            except Unsupported as e:
                outcomes[name] = f"skip: {e}"
            except Exception:  # recorded; the parent's test of this case fails with it
                outcomes[name] = traceback.format_exc()
            # Keep the ranks in step between cases so that one case's failure cannot leak into the next.
            dist.barrier()
        status = 0
    except BaseException:  # the group itself failed (a barrier timed out): the parent sees exit status 1
        traceback.print_exc()
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(outcomes, f)
        dist.destroy_process_group()
        # Every outcome is on disk and the group is gone: leave without the interpreter's teardown, where
        # torch's gloo state now and then aborts the process ("terminate called without an active
        # exception", after destroy_process_group has returned), which would fail a world that passed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _spawn(world, backend, device_type, names, tmp_dir, timeout=240):
    os.makedirs(tmp_dir, exist_ok=True)
    init_file = os.path.join(tmp_dir, "init")
    # One OpenMP thread per rank: the ranks share the machine's cores.
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        context = mp.spawn(_worker, args=(world, backend, device_type, init_file, tmp_dir, list(names)),
                           nprocs=world, join=False)
    finally:
        if saved is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    deadline = time.monotonic() + timeout
    try:
        # join() returns False while some process still runs (it waits for one process at a time).
        while not context.join(max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise AssertionError(f"world of {world} ({backend}) did not finish within {timeout} s")
    finally:
        for p in context.processes:  # only the processes spawned here
            if p.is_alive():
                p.kill()
    outcomes = {}
    for rank in range(world):
        with open(os.path.join(tmp_dir, f"rank{rank}.json")) as f:
            for name, outcome in json.load(f).items():
                failures = outcomes.setdefault(name, [])
                if outcome != "ok":
                    failures.append(outcome if outcome.startswith("skip: ") else f"rank {rank}:\n{outcome}")
    return outcomes


@pytest.fixture(scope="module")
def gloo_world(tmp_path_factory):
    """world size -> {name: [failures]}; each world is spawned once, on first use."""
    cache = {}

    def get(world):
        if world not in cache:
            cache[world] = _spawn(world, "gloo", "cpu", [*CASES, *CHECKS], str(tmp_path_factory.mktemp(f"w{world}")))
        return cache[world]

    return get


def _report(outcomes, name):
    assert name in outcomes, f"{name}: no outcome recorded"
    failures = outcomes[name]
    if failures and all(f.startswith("skip: ") for f in failures):
        pytest.skip(f"no backend supports this call ({failures[0][6:]})")
    assert not failures, "\n".join(failures)


def _run_here(names, world, rank, device):
    """Runs cases in this process; skips the test when every case is unsupported on `device`."""
    skipped = []
    for name in names:
        try:
            check_case(name, world, rank, device)
        except Unsupported as e:
            skipped.append(f"{name}: {e}")
    if len(skipped) == len(names):
        pytest.skip("no backend supports these calls: " + " | ".join(skipped))


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", CASES)
def test_ring_matches_fp64(gloo_world, world, name):
    _report(gloo_world(world), name)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", CHECKS)
def test_ring_checks(gloo_world, world, name):
    _report(gloo_world(world), name)


# ------------------------------------------------------------------------------------- no process group


@pytest.mark.parametrize("world", (1, 2, 3, 5))
def test_shard_layouts_without_a_process_group(world):
    """shard(rank=, world_size=) needs no process group; the shards partition the sequence as the C++
    layout says, for lengths with empty chunks too."""
    for s in (0, 1, world, 2 * world + 3, 31):
        x = torch.arange(s)
        zig = [fd.shard(x, 0, rank=r, world_size=world) for r in range(world)]
        chunks = x.tensor_split(2 * world)
        for r in range(world):
            torch.testing.assert_close(zig[r], torch.cat((chunks[r], chunks[2 * world - 1 - r])))
            assert zig[r].shape[0] == fd.shard_rows(s, world, r)
        contiguous = [fd.contiguous_shard(x, 0, rank=r, world_size=world) for r in range(world)]
        torch.testing.assert_close(torch.cat(contiguous), x)
    cu = [0, 4, 4, 11]
    for r in range(world):
        local = fd.shard_cu_seqlens(cu, rank=r, world_size=world)
        assert local.tolist() == [0, *itertools.accumulate(fd.shard_rows(n, world, r) for n in (4, 0, 7))]
    with pytest.raises(ValueError, match="layout: expected one of"):
        fd.shard(torch.arange(4), 0, layout="striped", rank=0, world_size=2)
    with pytest.raises(ValueError, match="cu_seqlens: expected non-decreasing"):
        fd.shard(torch.arange(4), 0, cu_seqlens=[0, 3, 2, 4], rank=0, world_size=2)


# ------------------------------------------------------------------------------------- worlds of one


def _single_process_group(backend, tmp_path):
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))


WORLD1_CASES = ("zigzag_causal_gqa_bf16", "zigzag_causal_seqlen_agreed", "varlen_zigzag_causal_gqa_bf16",
                "contiguous_window_f32")


def test_world_of_one_gloo(tmp_path):
    """A ring of one in this process: no transfers, the plan's calls and the merge only."""
    _single_process_group("gloo", tmp_path)
    try:
        _run_here(WORLD1_CASES, 1, 0, torch.device("cpu"))
        check_shard_gather_roundtrip(1, 0, torch.device("cpu"))
    finally:
        dist.destroy_process_group()


def test_world_of_one_nccl_cuda(tmp_path):
    require_device("cuda")
    if not dist.is_nccl_available():
        pytest.skip("torch was built without NCCL")
    torch.cuda.set_device(0)
    _single_process_group("nccl", tmp_path)
    try:
        device = torch.device("cuda", 0)
        check_packed_variants(1, 0, device)
        _run_here((*WORLD1_CASES, "zigzag_window_softcap_bf16", "varlen_zigzag_lengths_agreed_f16"), 1, 0, device)
        check_shard_gather_roundtrip(1, 0, device)
    finally:
        dist.destroy_process_group()


NCCL_NAMES = ("zigzag_causal_gqa_bf16", "zigzag_causal_window_f16", "contiguous_causal_gqa_bf16",
              "empty_shard_zigzag_causal", "varlen_zigzag_causal_gqa_bf16", "zigzag_causal_seqlen_agreed",
              "packed_variants", "errors", "errors_agreed", "shard_gather_roundtrip")


def test_world_of_two_nccl_cuda(tmp_path):
    """Two GPUs of one host (skipped with fewer): the ring's transfers through NCCL."""
    require_device("cuda")
    if torch.cuda.device_count() < 2 or not dist.is_nccl_available():
        pytest.skip("needs two CUDA devices and NCCL")
    outcomes = _spawn(2, "nccl", "cuda", NCCL_NAMES, str(tmp_path / "nccl"))
    for name in NCCL_NAMES:
        _report(outcomes, name)
