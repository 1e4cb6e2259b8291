"""Ring attention (context parallelism) over torch.distributed, with autograd.

Every rank of a process group holds a shard of the same sequence(s) of q, k and v (self-attention). The
K/V shards travel around the ring of ranks (double-buffered: the next block's transfer overlaps the
attention on the current one) and the partial results are merged with the log-sum-exp rule; the backward
passes K/V around again with their fp32 dK/dV accumulators, which arrive back at their owner after one
full turn. The semantics are those of the C++ ring (flashattn::dist, docs/distributed.md): the same
layouts (zigzag: the sequence is cut into 2N chunks, rank r holds chunks r and 2N-1-r, in that order;
contiguous: rank r holds the r-th of N chunks), the same global causal/window masks, and the same per-block
plan, which comes from the C++ planner (flashattn::dist::detail::plan_block_tasks through flashattn._C).
This module only moves tensors, calls the ordinary flashattn forward/backward ops on row slices, and merges
partial results in fp32.

    import torch.distributed as dist
    from flashattn.distributed import ring_flash_attn_func, shard, gather

    dist.init_process_group("nccl")          # or "gloo" for CPU tensors; torchrun sets the environment
    q_local = shard(q, dim=1)                # this rank's zigzag shard of (B, S, H, D)
    out_local = ring_flash_attn_func(q_local, k_local, v_local, causal=True, seqlen=S)
    out = gather(out_local, dim=1, seqlen=S) # the whole (B, S, H, D) on every rank

Refused (ValueError): dropout and ALiBi, whose values depend on global positions that a per-block call
cannot be told; the C++ ring refuses them for the same reason.

Importing this module imports torch and torch.distributed (``import flashattn`` alone does not).
"""

import functools
import itertools
import math

import torch
import torch.distributed as dist

from . import _C, _ops, _torch_ops
from ._arrays import last_dim_contiguous, native

__all__ = [
    "ring_flash_attn_func",
    "ring_flash_attn_kvpacked_func",
    "ring_flash_attn_qkvpacked_func",
    "ring_flash_attn_varlen_func",
    "ring_flash_attn_varlen_kvpacked_func",
    "ring_flash_attn_varlen_qkvpacked_func",
    "shard",
    "gather",
    "zigzag_shard",
    "zigzag_gather",
    "contiguous_shard",
    "contiguous_gather",
    "shard_cu_seqlens",
    "shard_rows",
    "LAYOUTS",
]

LAYOUTS = ("zigzag", "contiguous")

_INF = math.inf


# ------------------------------------------------------------------------------------------- the group


def _group_ranks(fn, group):
    """(world size, this process's rank) in `group` (None: the default group)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{fn}: torch.distributed is not initialised: call torch.distributed.init_process_group first "
            "(torchrun sets the environment it reads), or pass rank= and world_size= to the shard helpers"
        )
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{fn}: group: expected a process group this process belongs to, got one it is not in")
    return world, rank


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def _comm_device(group, like):
    """Where the small tensors of a collective go: beside `like` (NCCL needs CUDA tensors, gloo takes
    CPU ones), or, when `like` is not a tensor, the current CUDA device for NCCL groups and the CPU else."""
    if isinstance(like, torch.Tensor):
        return like.device
    if "nccl" in str(dist.get_backend(group)).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _check_layout(fn, layout):
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: layout: expected one of {LAYOUTS}, got {layout!r}")


def _lengths_of(fn, cu_seqlens, name):
    """The per-sequence lengths (list of ints) of cumulative lengths given as a tensor or a sequence."""
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() or cu_seqlens.is_complex():
            raise ValueError(
                f"{fn}: {name}: expected a 1-D integer tensor of batch + 1 offsets, got "
                f"{cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}"
            )
        values = cu_seqlens.tolist()
    else:
        try:
            values = [int(x) for x in cu_seqlens]
        except (TypeError, ValueError):
            raise ValueError(
                f"{fn}: {name}: expected cumulative lengths (batch + 1 ints), got {cu_seqlens!r}"
            ) from None
    if len(values) < 1 or values[0] != 0 or any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(
            f"{fn}: {name}: expected non-decreasing cumulative lengths starting at 0 (batch + 1 of them), "
            f"got {values}"
        )
    return [b - a for a, b in zip(values, values[1:])]


def _agree(fn, group, world, device, error, values):
    """Collective: every rank contributes its local check result (an exception or None) and a list of
    ints; returns every rank's list. If any rank's check failed, every rank raises (this rank its own
    error, the others a ValueError naming that rank) before any block moves, so no rank is left waiting."""
    header = torch.tensor([0 if error is None else 1, len(values)], dtype=torch.int64, device=device)
    headers = [torch.empty_like(header) for _ in range(world)]
    dist.all_gather(headers, header, group=group)
    headers = [h.tolist() for h in headers]
    if error is not None:
        raise error
    failed = [r for r, (flag, _) in enumerate(headers) if flag]
    if failed:
        raise ValueError(f"{fn}: rank {failed[0]} rejected the call (see its error); no transfer was started")
    counts = [n for _, n in headers]
    if len(set(counts)) != 1:
        raise ValueError(
            f"{fn}: cu_seqlens: expected the same number of sequences on every rank, got {counts} (by rank)"
        )
    if counts[0] == 0:
        return [[] for _ in range(world)]
    mine = torch.tensor(values, dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    return [g.tolist() for g in gathered]


# ------------------------------------------------------------------------------------------- the plan


@functools.lru_cache(maxsize=128)
def _plan(seqlens, varlen, world, rank, layout, causal, window_left, window_right):
    """The C++ ring's plan for `rank` (see flashattn._C._dist_ring_plan): rows of every rank, the local
    cu_seqlens, and per step the (q_row, q_rows, k_row, k_rows, window_left, window_right) calls."""
    return _C._dist_ring_plan(list(seqlens), varlen, world, rank, layout, causal, window_left, window_right)


def _placement(seqlens, world, rank, layout):
    """Where `rank`'s local rows sit globally: a list of (global_row, local_row, length) runs over all the
    (packed) sequences of `seqlens`."""
    runs, global_base, local_base = [], 0, 0
    for length in seqlens:
        held = 0
        for start, n, local_row in _C._dist_shard_segments(length, world, rank, layout):
            if n:
                runs.append((global_base + start, local_base + local_row, n))
            held += n
        global_base += length
        local_base += held
    return runs, local_base


def shard_rows(seqlen, world_size, rank, layout="zigzag", cu_seqlens=None):
    """Rows of the sequence dimension that `rank` of `world_size` holds: of one sequence of `seqlen`
    positions, or (cu_seqlens given, seqlen ignored) of the packed sequences of `cu_seqlens`."""
    fn = "flashattn.distributed.shard_rows"
    _check_layout(fn, layout)
    lengths = [int(seqlen)] if cu_seqlens is None else _lengths_of(fn, cu_seqlens, "cu_seqlens")
    return _placement(lengths, int(world_size), int(rank), layout)[1]


def _resolve_ranks(fn, group, rank, world_size):
    if rank is None or world_size is None:
        w, r = _group_ranks(fn, group)
        return (w if world_size is None else int(world_size)), (r if rank is None else int(rank))
    return int(world_size), int(rank)


def shard(tensor, dim=1, group=None, *, layout="zigzag", cu_seqlens=None, rank=None, world_size=None):
    """This rank's shard of a full tensor along `dim` (a new tensor; differentiable like torch.cat).

    Dense: dim 1 of q/k/v/out (B, S, H, D), dim 2 of a softmax_lse (B, H, S). With `cu_seqlens` (the
    GLOBAL cumulative lengths of packed sequences) every sequence is sharded on its own and the shards
    are packed in sequence order: dim 0 of (total, H, D), dim 1 of a varlen softmax_lse (H, total).
    rank/world_size default to this process's rank in `group` (given both, no process group is needed).
    """
    fn = "flashattn.distributed.shard"
    _check_layout(fn, layout)
    world, rank = _resolve_ranks(fn, group, rank, world_size)
    dim = dim % tensor.dim()
    if cu_seqlens is None:
        lengths = [tensor.shape[dim]]
    else:
        lengths = _lengths_of(fn, cu_seqlens, "cu_seqlens")
        if sum(lengths) != tensor.shape[dim]:
            raise ValueError(
                f"{fn}: tensor: expected {sum(lengths)} rows in dim {dim} (cu_seqlens[-1]), got shape "
                f"{tuple(tensor.shape)}"
            )
    runs, _ = _placement(lengths, world, rank, layout)
    parts = [tensor.narrow(dim, g, n) for g, _, n in runs]
    if not parts:
        return tensor.narrow(dim, 0, 0).clone()
    return parts[0].clone() if len(parts) == 1 else torch.cat(parts, dim)


def shard_cu_seqlens(cu_seqlens, group=None, *, layout="zigzag", rank=None, world_size=None):
    """The local cu_seqlens (int32, on cu_seqlens' device when it is a tensor) of this rank's shard of the
    packed sequences whose GLOBAL cumulative lengths are `cu_seqlens`: what ring_flash_attn_varlen_func
    expects as its cu_seqlens argument."""
    fn = "flashattn.distributed.shard_cu_seqlens"
    _check_layout(fn, layout)
    world, rank = _resolve_ranks(fn, group, rank, world_size)
    lengths = _lengths_of(fn, cu_seqlens, "cu_seqlens")
    local = [0]
    for length in lengths:
        local.append(local[-1] + _placement([length], world, rank, layout)[1])
    device = cu_seqlens.device if isinstance(cu_seqlens, torch.Tensor) else None
    return torch.tensor(local, dtype=torch.int32, device=device)


def gather(local, dim=1, group=None, *, layout="zigzag", seqlen=None, cu_seqlens=None):
    """Collective: the full tensor, on every rank, from every rank's shard along `dim` (the inverse of
    `shard`). The result is not differentiable (it is assembled from torch.distributed.all_gather).

    The global length comes from `seqlen` (dense), from `cu_seqlens` (packed sequences: the GLOBAL
    cumulative lengths), or, when neither is given, from one extra all_gather of the ranks' row counts.
    """
    fn = "flashattn.distributed.gather"
    _check_layout(fn, layout)
    world, rank = _group_ranks(fn, group)
    dim = dim % local.dim()
    rows = {rank: local.shape[dim]}
    if cu_seqlens is not None:
        lengths = _lengths_of(fn, cu_seqlens, "cu_seqlens")
    elif seqlen is not None:
        lengths = [int(seqlen)]
    else:
        rows = dict(enumerate(r[0] for r in _agree(fn, group, world, local.device, None, [local.shape[dim]])))
        lengths = [sum(rows.values())]
    placements = [_placement(lengths, world, r, layout) for r in range(world)]
    # Every rank checks the rows it knows of (all of them after the agreement, so all raise together).
    for r, n in sorted(rows.items()):
        if placements[r][1] != n:
            raise ValueError(
                f"{fn}: local: expected {placements[r][1]} rows in dim {dim} (rank {r}'s {layout} share of "
                f"{lengths if cu_seqlens is not None else lengths[0]} over {world} ranks), got {n} (rank {r})"
            )
    cap = max(p[1] for p in placements)
    full_shape = list(local.shape)
    full_shape[dim] = sum(lengths)
    full = local.new_empty(full_shape)
    if cap == 0:
        return full
    # all_gather needs equal sizes: pad every shard to the largest.
    padded_shape = list(local.shape)
    padded_shape[dim] = cap
    padded = local.detach().new_zeros(padded_shape)
    padded.narrow(dim, 0, local.shape[dim]).copy_(local.detach())
    shards = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(shards, padded, group=group)
    for r, (runs, _) in enumerate(placements):
        for g, l, n in runs:
            full.narrow(dim, g, n).copy_(shards[r].narrow(dim, l, n))
    return full


zigzag_shard = functools.partial(shard, layout="zigzag")
zigzag_shard.__doc__ = "shard(..., layout='zigzag'): rank r holds chunks r and 2N-1-r of 2N."
zigzag_gather = functools.partial(gather, layout="zigzag")
zigzag_gather.__doc__ = "gather(..., layout='zigzag')."
contiguous_shard = functools.partial(shard, layout="contiguous")
contiguous_shard.__doc__ = "shard(..., layout='contiguous'): rank r holds the r-th of N chunks."
contiguous_gather = functools.partial(gather, layout="contiguous")
contiguous_gather.__doc__ = "gather(..., layout='contiguous')."


# ------------------------------------------------------------------------------------------- the ring


class _Ring:
    """The facts of one ring call that forward and backward share: the group, the ring neighbours and the
    plan. Tensors inside the ring are batched: dense (B, rows, H, D) as given, varlen (1, total, H, D)."""

    def __init__(self, group, world, rank, plan, options):
        self.group, self.world, self.rank = group, world, rank
        self.next = _global_rank(group, (rank + 1) % world)
        self.prev = _global_rank(group, (rank - 1) % world)
        self.rows = plan["rows"]
        self.steps = plan["steps"]
        self.softmax_scale, self.softcap = options

    def source(self, step):
        """Whose K/V block this rank holds at `step`."""
        return (self.rank - step) % self.world

    def shift(self, send, rows_in, tag):
        """Starts sending `send` (2, B, rows, Hk, D) to the next rank and receiving the block of `rows_in`
        rows from the previous one; returns the pending transfer (wait() gives the received block)."""
        shape = list(send.shape)
        shape[2] = rows_in
        return _Pending(send, send.new_empty(shape), self, tag)

    def call_options(self, task):
        """(causal, window_left, window_right) of one per-block call, as the C++ ring forms them
        (block_options in src/dist/ring_setup.cpp): a window (unbounded, 0) is passed as causal."""
        _, _, _, _, left, right = task
        causal = right == 0 and left < 0
        return causal, int(left), -1 if causal else int(right)


class _Pending:
    def __init__(self, send, recv, ring, tag):
        self.send, self.recv = send, recv
        # An empty block (a rank holding no rows) is not sent: its size follows from the plan on both ends,
        # so sender and receiver skip it alike.
        ops = []
        if send.numel():
            ops.append(dist.P2POp(dist.isend, send, ring.next, ring.group, tag))
        if recv.numel():
            ops.append(dist.P2POp(dist.irecv, recv, ring.prev, ring.group, tag))
        self.works = dist.batch_isend_irecv(ops) if ops else []

    def wait(self):
        """Host transports (gloo) block until the block has arrived; NCCL makes the current stream wait."""
        for work in self.works:
            work.wait()
        self.works, self.send = [], None
        return self.recv


def _rows(x, row, n):
    return x[:, row : row + n]


def _lse_rows(x, row, n):
    return x[:, :, row : row + n]


def _merge(acc_out, acc_lse, row, n, out_part, lse_part):
    """Adds a partial result over some keys to the fp32 accumulators with the log-sum-exp rule:
    lse = log(exp(lse_acc) + exp(lse_part)), out = exp(lse_acc - lse) out_acc + exp(lse_part - lse) out_part.
    lse_part = +inf (a row that saw no key) contributes nothing, as in the C++ ring's merge_partial."""
    o = _rows(acc_out, row, n)
    lse = _lse_rows(acc_lse, row, n)
    lse_part = lse_part.masked_fill(lse_part == _INF, -_INF)
    merged = torch.logaddexp(lse, lse_part)
    base = merged.masked_fill(merged == -_INF, 0.0)  # rows still empty: weights exp(-inf) = 0, not NaN
    w_acc = torch.exp(lse - base).transpose(1, 2).unsqueeze(-1)  # (B, n, H, 1)
    w_part = torch.exp(lse_part - base).transpose(1, 2).unsqueeze(-1)
    o.mul_(w_acc).add_(out_part.float() * w_part)
    lse.copy_(merged)


def _ring_forward(ring, q, k, v):
    """(out, softmax_lse) of this rank's queries over the whole sequence; q/k/v batched."""
    batch, rows, heads, dim = q.shape
    acc_out = torch.zeros((batch, rows, heads, dim), dtype=torch.float32, device=q.device)
    acc_lse = torch.full((batch, heads, rows), -_INF, dtype=torch.float32, device=q.device)
    kv = torch.stack((k, v)) if ring.world > 1 else None  # the travelling block: one buffer, one message
    for step in range(ring.world):
        pending = None
        if step + 1 < ring.world:
            pending = ring.shift(kv, ring.rows[ring.source(step + 1)], tag=step)
        # The own block (step 0) is read in place; later blocks from the buffer that arrived.
        k_blk, v_blk = (k, v) if step == 0 else (kv[0], kv[1])
        for task in ring.steps[step]:
            q_row, q_rows, k_row, k_rows = task[:4]
            causal, left, right = ring.call_options(task)
            out_part, lse_part = _torch_ops.fwd(
                _rows(q, q_row, q_rows),
                _rows(k_blk, k_row, k_rows),
                _rows(v_blk, k_row, k_rows),
                None, None, 0, 0, 0.0, ring.softmax_scale, causal, left, right, ring.softcap, None, None, False,
            )  # fmt: skip
            _merge(acc_out, acc_lse, q_row, q_rows, out_part, lse_part)
        if pending is not None:
            kv = pending.wait()
    # A row that saw no key at all: out 0 (never written) and lse +inf, as a plain call gives.
    lse = acc_lse.masked_fill(acc_lse == -_INF, _INF)
    return acc_out.to(q.dtype), lse


def _ring_backward(ring, dout, q, k, v, out, lse, deterministic):
    """(dq, dk, dv) of this rank's shards. K/V travel as in the forward; with each block travels its fp32
    dK/dV accumulator, to which every rank adds its queries' contribution; it is home after world shifts.
    Each per-block backward is given the global out and softmax_lse, so its P and D are the global ones
    restricted to the block and the blocks' gradients simply add up (docs/distributed.md, Backward)."""
    batch, rows, heads_k, dim = k.shape
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dkv = torch.zeros((2, batch, rows, heads_k, dim), dtype=torch.float32, device=q.device)
    kv = torch.stack((k, v)) if ring.world > 1 else None
    arriving = None  # the transfer bringing the accumulator of the block held now
    for step in range(ring.world):
        kv_pending = None
        incoming = ring.rows[ring.source(step + 1)]
        if step + 1 < ring.world:
            kv_pending = ring.shift(kv, incoming, tag=2 * step)
        k_blk, v_blk = (k, v) if step == 0 else (kv[0], kv[1])
        for task in ring.steps[step]:
            q_row, q_rows, k_row, k_rows = task[:4]
            causal, left, right = ring.call_options(task)
            dq_part, dk_part, dv_part = _torch_ops.bwd(
                _rows(dout, q_row, q_rows),
                _rows(q, q_row, q_rows),
                _rows(k_blk, k_row, k_rows),
                _rows(v_blk, k_row, k_rows),
                _rows(out, q_row, q_rows),
                _lse_rows(lse, q_row, q_rows),
                None, None, 0, 0, 0.0, ring.softmax_scale, causal, left, right, ring.softcap, None, None,
                deterministic,
            )  # fmt: skip
            _rows(dq_acc, q_row, q_rows).add_(dq_part)
            if arriving is not None:  # first use of this block's accumulator: it must have arrived
                dkv = arriving.wait()
                arriving = None
            _rows(dkv[0], k_row, k_rows).add_(dk_part)
            _rows(dkv[1], k_row, k_rows).add_(dv_part)
        if ring.world > 1:
            if arriving is not None:  # no call touched this block: pass its accumulator on unchanged
                dkv = arriving.wait()
            # After the last step this sends every accumulator to its home rank.
            arriving = ring.shift(dkv, incoming, tag=2 * step + 1)
        if kv_pending is not None:
            kv = kv_pending.wait()
    if arriving is not None:
        dkv = arriving.wait()  # the complete dK/dV of this rank's own block
    return dq_acc.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring, varlen, deterministic):
        batched = (lambda x: x.unsqueeze(0)) if varlen else (lambda x: x)
        qb, kb, vb = (batched(x.detach()) for x in (q, k, v))
        out, lse = _ring_forward(ring, qb, kb, vb)
        ctx.save_for_backward(qb, kb, vb, out, lse)
        ctx.ring, ctx.varlen, ctx.deterministic = ring, varlen, deterministic
        if varlen:
            out, lse = out[0], lse[0]
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        qb, kb, vb, out, lse = ctx.saved_tensors
        dout = dout.contiguous()
        if ctx.varlen:
            dout = dout.unsqueeze(0)
        dq, dk, dv = _ring_backward(ctx.ring, dout, qb, kb, vb, out, lse, ctx.deterministic)
        if ctx.varlen:
            dq, dk, dv = dq[0], dk[0], dv[0]
        return dq, dk, dv, None, None, None


# ------------------------------------------------------------------------------------------- checks


def _check_call(fn, q, k, v, varlen, dropout_p, alibi_slopes, window_size):
    """What this rank can check before any transfer: everything but the global lengths."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name}: expected a torch.Tensor, got {type(x).__module__}.{type(x).__qualname__}")
    ndim = 3 if varlen else 4
    layout = "(total_local, heads, head_dim)" if varlen else "(batch, seqlen_local, heads, head_dim)"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != ndim:
            raise ValueError(f"{fn}: {name}: expected {ndim} dims {layout}, got shape {tuple(x.shape)}")
    row_dim = 0 if varlen else 1
    for name, x in (("k", k), ("v", v)):
        if x.shape[row_dim] != q.shape[row_dim] or (not varlen and x.shape[0] != q.shape[0]):
            raise ValueError(
                f"{fn}: {name}: expected the rows of q (self-attention over one sharded sequence: "
                f"{tuple(q.shape[: row_dim + 1])} leading dims), got shape {tuple(x.shape)}"
            )
    if dropout_p != 0.0:
        raise ValueError(
            f"{fn}: dropout_p: expected 0.0 (ring attention does not support dropout: the mask depends on "
            f"global positions that a per-block call cannot be told), got {dropout_p}"
        )
    if alibi_slopes is not None:
        raise ValueError(
            f"{fn}: alibi_slopes: expected None (ring attention does not support ALiBi: the bias depends on "
            "global positions that a per-block call cannot be told), got a tensor"
        )
    _ops.window_pair(window_size)


def _check_backends(fn, q, k, v, cu_local, options, backward):
    """The local call as flashattn sees it must be supported (validated exactly as a plain call would be);
    for the backward, by a backend whose backward reads the out and softmax_lse it is given. Nothing is
    computed; the outputs are uninitialised stand-ins of their own (validation rejects outputs that share
    memory with the inputs, as it would in the real call), freed on return and reused from torch's cache."""
    q, k, v = (native(x.detach()) for x in (q, k, v))
    out = torch.empty_like(q)
    varlen = cu_local is not None
    lse = torch.empty(_ops.lse_shape(q, varlen), dtype=torch.float32, device=q.device)
    kwargs = dict(dropout_p=0.0, **_ops._options(alibi_slopes=None, backend=None, **options))
    if varlen:
        cu = torch.tensor(cu_local, dtype=torch.int32, device=q.device)
        longest = max((b - a for a, b in zip(cu_local, cu_local[1:])), default=0)
        kwargs.update(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest)
    else:
        kwargs.update(cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0)
    if backward:
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        answers = _C.query_bwd(q, q, k, v, q, lse, out, dk, dv, deterministic=False, **kwargs)
    else:
        answers = _C.query_fwd(q, k, v, out, lse, **kwargs)
    direction = "backward" if backward else "forward"
    chosen = [a for a in answers if a["chosen"]]
    if not chosen:
        reasons = "; ".join(f"{a['name']}: {a['reason']}" for a in answers)
        raise NotImplementedError(f"{fn}: no backend supports the per-block {direction} calls ({reasons})")
    if backward and chosen[0]["name"] == "cpu_reference":
        raise NotImplementedError(
            f"{fn}: backend: expected one whose backward reads the softmax_lse and out it is given (the ring "
            "passes the global ones with each block), got cpu_reference, which recomputes them from the block"
        )


# ------------------------------------------------------------------------------------------- the API


def _ring_attention(fn, q, k, v, *, varlen, seqlen, cu_seqlens, global_seqlens, dropout_p, softmax_scale, causal,
                    window_size, softcap, alibi_slopes, deterministic, group, layout):
    """Checks, agrees on the global lengths if needed, plans, and runs the autograd Function."""
    world, rank = _group_ranks(fn, group)
    # Without the global lengths every rank takes part in one small collective, which also lets every rank
    # raise together when one rank's arguments are wrong; with them no collective is made and a wrong
    # argument raises on the ranks that got it (the same arguments everywhere raise everywhere).
    agree = global_seqlens is None if varlen else seqlen is None
    error, lengths, local_lengths, cu_local, mine = None, None, [], None, []
    try:
        _check_layout(fn, layout)
        _check_call(fn, q, k, v, varlen, dropout_p, alibi_slopes, window_size)
        q, k, v = (last_dim_contiguous(x) for x in (q, k, v))  # what the kernels need, copied once here
        left, right = _ops.window_pair(window_size)
        options = dict(softmax_scale=softmax_scale, causal=causal, window_size=(left, right), softcap=softcap)
        if varlen:
            local_lengths = _lengths_of(fn, cu_seqlens, "cu_seqlens")
            if sum(local_lengths) != q.shape[0]:
                raise ValueError(
                    f"{fn}: cu_seqlens: expected local offsets ending at q's {q.shape[0]} rows, got "
                    f"{[0, *itertools.accumulate(local_lengths)]}"
                )
            if global_seqlens is not None:
                lengths = [int(x) for x in global_seqlens]
                if len(lengths) != len(local_lengths):
                    raise ValueError(
                        f"{fn}: global_seqlens: expected one length per sequence of cu_seqlens "
                        f"({len(local_lengths)}), got {len(lengths)}"
                    )
            cu_local = [0, *itertools.accumulate(local_lengths)]
        elif seqlen is not None:
            lengths = [int(seqlen)]
        _check_backends(fn, q, k, v, cu_local, options, backward=False)
        if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
            _check_backends(fn, q, k, v, cu_local, options, backward=True)
        mine = local_lengths if varlen else [q.shape[1]]
    except (ValueError, TypeError, NotImplementedError) as e:
        if not agree:
            raise
        error = e
    if agree:
        every = _agree(fn, group, world, _comm_device(group, q), error, mine)
        lengths = [sum(col) for col in zip(*every)] if varlen else [sum(r[0] for r in every)]
    else:
        every = {rank: mine}
    plan = _plan(tuple(lengths), varlen, world, rank, layout, bool(causal), left, right)
    # Every rank's rows must be its share of the global lengths. After an agreement every rank checks every
    # rank's (and all raise together); otherwise each rank checks its own.
    for r in range(world) if agree else (rank,):
        if varlen:
            want = [_placement([n], world, r, layout)[1] for n in lengths]
            if every[r] != want:
                raise ValueError(
                    f"{fn}: cu_seqlens: expected {[0, *itertools.accumulate(want)]}: rank {r}'s {layout} share of "
                    f"the packed sequences of lengths {lengths} over {world} ranks, got "
                    f"{[0, *itertools.accumulate(every[r])]} (rank {r})"
                )
        elif every[r][0] != plan["rows"][r]:
            raise ValueError(
                f"{fn}: q: expected {plan['rows'][r]} rows: rank {r}'s {layout} share of a sequence of "
                f"{lengths[0]} over {world} ranks, got {every[r][0]} rows (rank {r})"
            )
    ring = _Ring(group, world, rank, plan, (None if softmax_scale is None else float(softmax_scale), float(softcap)))
    return _RingAttention.apply(q, k, v, ring, varlen, bool(deterministic))


def _result(out, lse, return_attn_probs):
    return (out, lse, None) if return_attn_probs else out


def ring_flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    group=None,
    *,
    layout="zigzag",
    seqlen=None,
    softcap=0.0,
):
    """Ring attention of this rank's shards q (B, S_local, H, D) and k, v (B, S_local, Hk, D) of one
    sequence of `seqlen` positions sharded over the ranks of `group` (None: the default group).

    Collective: every rank of the group calls it with its shards (same batch, heads, head_dim, options).
    layout: 'zigzag' (default) or 'contiguous', as produced by `shard` (ring-flash-attention's function of
    this name takes contiguous shards: pass layout='contiguous' for those). seqlen: the global sequence
    length; when None it is found with one small all_gather of the ranks' row counts (a host
    synchronisation on CUDA: pass seqlen in training loops). causal and window_size apply to global
    positions (flash-attn semantics for the whole sequence). GQA/MQA: Hk divides H. Returns out
    (B, S_local, H, D), or (out, softmax_lse (B, H, S_local) float32, None) with return_attn_probs=True.
    Differentiable in q, k and v. dropout_p and alibi_slopes are refused (ValueError).
    """
    out, lse = _ring_attention(
        "flashattn.distributed.ring_flash_attn_func", q, k, v, varlen=False, seqlen=seqlen, cu_seqlens=None,
        global_seqlens=None, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
        group=group, layout=layout,
    )  # fmt: skip
    return _result(out, lse, return_attn_probs)


def ring_flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    group=None,
    *,
    layout="zigzag",
    seqlen=None,
    softcap=0.0,
):
    """ring_flash_attn_func with k, v packed as kv (B, S_local, 2, Hk, D)."""
    return ring_flash_attn_func(
        q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, alibi_slopes, deterministic,
        return_attn_probs, group, layout=layout, seqlen=seqlen, softcap=softcap,
    )  # fmt: skip


def ring_flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    group=None,
    *,
    layout="zigzag",
    seqlen=None,
    softcap=0.0,
):
    """ring_flash_attn_func with q, k, v packed as qkv (B, S_local, 3, H, D)."""
    return ring_flash_attn_func(
        qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size, alibi_slopes,
        deterministic, return_attn_probs, group, layout=layout, seqlen=seqlen, softcap=softcap,
    )  # fmt: skip


def ring_flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    group=None,
    *,
    layout="zigzag",
    global_seqlens=None,
    softcap=0.0,
):
    """Ring attention over packed sequences, each sharded on its own over the ranks of `group`.

    q (total_local, H, D), k/v (total_local, Hk, D): this rank's shard of every sequence, packed in
    sequence order (what `shard(x, 0, cu_seqlens=global_cu_seqlens)` returns). cu_seqlens: the LOCAL
    cumulative lengths (int32, batch + 1) of those shards, i.e. offsets into q's rows, as in
    flash_attn_varlen_func (`shard_cu_seqlens(global_cu_seqlens)` computes them). global_seqlens: the
    global length of each sequence; when None they are found with a small all_gather of every rank's
    local lengths (with a CUDA cu_seqlens, a host synchronisation either way). max_seqlen is accepted
    for flash-attn's signature and unused. Masks are per sequence over global positions. Returns out
    (total_local, H, D), or (out, softmax_lse (H, total_local), None) with return_attn_probs=True.
    """
    del max_seqlen  # sizes come from cu_seqlens
    out, lse = _ring_attention(
        "flashattn.distributed.ring_flash_attn_varlen_func", q, k, v, varlen=True, seqlen=None,
        cu_seqlens=cu_seqlens, global_seqlens=global_seqlens, dropout_p=dropout_p, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        deterministic=deterministic, group=group, layout=layout,
    )  # fmt: skip
    return _result(out, lse, return_attn_probs)


def ring_flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens,
    max_seqlen=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    group=None,
    *,
    layout="zigzag",
    global_seqlens=None,
    softcap=0.0,
):
    """ring_flash_attn_varlen_func with k, v packed as kv (total_local, 2, Hk, D)."""
    return ring_flash_attn_varlen_func(
        q, kv[:, 0], kv[:, 1], cu_seqlens, max_seqlen, dropout_p, softmax_scale, causal, window_size,
        alibi_slopes, deterministic, return_attn_probs, group, layout=layout, global_seqlens=global_seqlens,
        softcap=softcap,
    )  # fmt: skip


def ring_flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    group=None,
    *,
    layout="zigzag",
    global_seqlens=None,
    softcap=0.0,
):
    """ring_flash_attn_varlen_func with q, k, v packed as qkv (total_local, 3, H, D)."""
    return ring_flash_attn_varlen_func(
        qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, max_seqlen, dropout_p, softmax_scale, causal, window_size,
        alibi_slopes, deterministic, return_attn_probs, group, layout=layout, global_seqlens=global_seqlens,
        softcap=softcap,
    )  # fmt: skip
