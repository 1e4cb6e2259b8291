"""float64 numpy reference of flash-attn 2.8 semantics, written independently of the library: forward,
analytic backward, dropout keep mask (Philox4x32-10, as documented in src/common/philox.h), rotary, and
flash_attn_with_kvcache. Shared by the numpy tests and the torch tests (which convert to numpy).

Layouts: one sequence at a time, q (Sq, H, D), k/v (Sk, Hk, D); batched helpers loop over sequences.
"""

import numpy as np

# ---------------------------------------------------------------------------------------------- masks


def visible(sq, sk, causal=False, window=(-1, -1)):
    """Boolean (sq, sk): query i sees key j in [i + sk - sq - left, i + sk - sq + right]."""
    left, right = window
    if causal:
        right = 0
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = i + sk - sq
    vis = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    return vis


def distance(sq, sk):
    """|i + sk - sq - j|, the ALiBi distance, (sq, sk)."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    return np.abs(i + sk - sq - j).astype(np.float64)


# -------------------------------------------------------------------------------------------- dropout

_MASK32 = np.uint64(0xFFFFFFFF)


def _philox4x32_10(c0, c1, c2, c3, key0, key1):
    """Philox4x32-10 on uint64 arrays holding 32-bit values."""
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    w0, w1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
    k0, k1 = np.uint64(key0), np.uint64(key1)
    for _ in range(10):
        p0 = m0 * c0
        p1 = m1 * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _MASK32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _MASK32
        k0 = (k0 + w0) & _MASK32
        k1 = (k1 + w1) & _MASK32
    return c0, c1, c2, c3


def dropout_keep(seed, offset, p, b, h, heads, sq, sk):
    """Keep mask (sq, sk) of attention row block (batch b, head h): element (i, j) is dropped when the
    Philox word for counter (j // 4, i, b * heads + h, offset) at lane j % 4 is below p * 2^32."""
    i = np.arange(sq, dtype=np.uint64)[:, None]
    j = np.arange(sk, dtype=np.uint64)[None, :]
    shape = (sq, sk)
    c0 = np.broadcast_to(j >> np.uint64(2), shape)
    c1 = np.broadcast_to(i, shape)
    c2 = np.full(shape, (b * heads + h) & 0xFFFFFFFF, dtype=np.uint64)
    c3 = np.full(shape, offset & 0xFFFFFFFF, dtype=np.uint64)
    key0 = seed & 0xFFFFFFFF
    key1 = ((seed >> 32) ^ (offset >> 32)) & 0xFFFFFFFF
    words = np.stack(_philox4x32_10(c0, c1, c2, c3, key0, key1))  # (4, sq, sk)
    lane = np.broadcast_to((j & np.uint64(3)).astype(np.int64), shape)
    word = np.take_along_axis(words, lane[None], axis=0)[0]
    threshold = min(int(float(np.float32(p)) * 4294967296.0), 0xFFFFFFFF)
    return word >= np.uint64(threshold)


# --------------------------------------------------------------------------------------- one sequence


def _logits(q, k, h, hk, scale, softcap, slope, dist):
    qk = q[:, h, :] @ k[:, hk, :].T
    s = qk * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if slope:
        s = s - slope * dist
    return qk, s


def sequence_forward(q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, slopes=None,
                     dropout=None):
    """One sequence: q (Sq, H, D), k/v (Sk, Hk, D) in float64. slopes (H,) or None. dropout: None or
    (p, keep) with keep(h) -> (Sq, Sk) bool. Returns out (Sq, H, D), lse (H, Sq), probs (H, Sq, Sk)."""
    sq, heads, dim = q.shape
    sk, heads_k, _ = k.shape
    scale = dim**-0.5 if scale is None else scale
    vis = visible(sq, sk, causal, window)
    dist = distance(sq, sk)
    out = np.zeros((sq, heads, v.shape[2]))
    lse = np.full((heads, sq), np.inf)
    probs = np.zeros((heads, sq, sk))
    for h in range(heads):
        hk = h // (heads // heads_k)
        _, s = _logits(q, k, h, hk, scale, softcap, 0.0 if slopes is None else slopes[h], dist)
        s = np.where(vis, s, -np.inf)
        rows = vis.any(axis=1)
        m = np.where(rows, s.max(axis=1, initial=-np.inf), 0.0)
        e = np.where(vis, np.exp(s - m[:, None]), 0.0)
        total = e.sum(axis=1)
        lse[h, rows] = m[rows] + np.log(total[rows])
        p = np.where(rows[:, None], e / np.where(total > 0, total, 1.0)[:, None], 0.0)
        probs[h] = p
        pz = p
        if dropout is not None:
            pd, keep = dropout
            pz = p * keep(h) / (1.0 - pd)
        out[:, h, :] = pz @ v[:, hk, :]
    return out, lse, probs


def sequence_backward(dout, q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, slopes=None,
                      dropout=None):
    """Analytic gradients (dq, dk, dv) of sequence_forward's out against dout (Sq, H, D), float64."""
    sq, heads, dim = q.shape
    sk, heads_k, _ = k.shape
    scale = dim**-0.5 if scale is None else scale
    _, _, probs = sequence_forward(q, k, v, scale=scale, causal=causal, window=window, softcap=softcap,
                                   slopes=slopes)
    dist = distance(sq, sk)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for h in range(heads):
        hk = h // (heads // heads_k)
        p = probs[h]
        z = np.ones_like(p)
        if dropout is not None:
            pd, keep = dropout
            z = keep(h) / (1.0 - pd)
        do = dout[:, h, :]
        dv[:, hk, :] += (p * z).T @ do
        dp = (do @ v[:, hk, :].T) * z
        ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
        qk, _ = _logits(q, k, h, hk, scale, softcap, 0.0, dist)
        if softcap > 0:
            dlogit = scale * (1.0 - np.tanh(qk * scale / softcap) ** 2)
        else:
            dlogit = scale
        dqk = ds * dlogit
        dq[:, h, :] = dqk @ k[:, hk, :]
        dk[:, hk, :] += dqk.T @ q[:, h, :]
    return dq, dk, dv


# ------------------------------------------------------------------------------------------- batched


def _slopes_of(alibi, b):
    if alibi is None:
        return None
    alibi = np.asarray(alibi, dtype=np.float64)
    return alibi if alibi.ndim == 1 else alibi[b]


def _dropout_of(dropout, b, heads, sq, sk):
    if dropout is None:
        return None
    p, seed, offset = dropout
    return p, lambda h: dropout_keep(seed, offset, p, b, h, heads, sq, sk)


def _segments(cu):
    cu = np.asarray(cu)
    return [(int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]


def attention(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, scale=None, causal=False, window=(-1, -1),
              softcap=0.0, alibi=None, dropout=None):
    """Batched forward in float64. Dense q (B, Sq, H, D) or varlen q (total_q, H, D) with cu_seqlens.
    dropout: None or (p, seed, offset). Returns out (like q) and lse ((B, H, Sq) or (H, total_q))."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    kw = dict(scale=scale, causal=causal, window=window, softcap=softcap)
    if cu_seqlens_q is None:
        outs, lses = [], []
        for b in range(q.shape[0]):
            o, l, _ = sequence_forward(q[b], k[b], v[b], slopes=_slopes_of(alibi, b),
                                       dropout=_dropout_of(dropout, b, q.shape[2], q.shape[1], k.shape[1]), **kw)
            outs.append(o)
            lses.append(l)
        return np.stack(outs), np.stack(lses)
    out = np.zeros(q.shape[:2] + (v.shape[2],))
    lse = np.full((q.shape[1], q.shape[0]), np.inf)
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(_segments(cu_seqlens_q), _segments(cu_seqlens_k))):
        o, l, _ = sequence_forward(q[q0:q1], k[k0:k1], v[k0:k1], slopes=_slopes_of(alibi, b),
                                   dropout=_dropout_of(dropout, b, q.shape[1], q1 - q0, k1 - k0), **kw)
        out[q0:q1] = o
        lse[:, q0:q1] = l
    return out, lse


def attention_backward(dout, q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, scale=None, causal=False,
                       window=(-1, -1), softcap=0.0, alibi=None, dropout=None):
    """Batched analytic backward in float64: (dq, dk, dv) shaped like q, k, v."""
    dout, q, k, v = (np.asarray(x, dtype=np.float64) for x in (dout, q, k, v))
    kw = dict(scale=scale, causal=causal, window=window, softcap=softcap)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    if cu_seqlens_q is None:
        for b in range(q.shape[0]):
            dq[b], dk[b], dv[b] = sequence_backward(
                dout[b], q[b], k[b], v[b], slopes=_slopes_of(alibi, b),
                dropout=_dropout_of(dropout, b, q.shape[2], q.shape[1], k.shape[1]), **kw)
        return dq, dk, dv
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(_segments(cu_seqlens_q), _segments(cu_seqlens_k))):
        dq[q0:q1], dk[k0:k1], dv[k0:k1] = sequence_backward(
            dout[q0:q1], q[q0:q1], k[k0:k1], v[k0:k1], slopes=_slopes_of(alibi, b),
            dropout=_dropout_of(dropout, b, q.shape[1], q1 - q0, k1 - k0), **kw)
    return dq, dk, dv


# ------------------------------------------------------------------------------------------ kv cache


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (n, H, D) at `positions` (n,) with tables cos/sin (Sro, rd / 2)."""
    x = x.copy()
    half = cos.shape[1]
    c = cos[positions][:, None, :]
    s = sin[positions][:, None, :]
    if interleaved:
        i0, i1 = np.arange(half) * 2, np.arange(half) * 2 + 1
    else:
        i0, i1 = np.arange(half), np.arange(half) + half
    x0, x1 = x[..., i0].copy(), x[..., i1].copy()
    x[..., i0] = x0 * c - x1 * s
    x[..., i1] = x0 * s + x1 * c
    return x


def _cache_rows(block_table, page_size, b, positions):
    """(block, row) of logical cache positions of sequence b in a paged cache."""
    positions = np.asarray(positions)
    return np.asarray(block_table)[b, positions // page_size], positions % page_size


def kvcache_attention(q, k_cache, v_cache, k_new=None, v_new=None, *, cache_seqlens=None, cache_batch_idx=None,
                      cache_leftpad=None, block_table=None, rotary_cos=None, rotary_sin=None,
                      rotary_interleaved=True, scale=None, causal=False, window=(-1, -1), softcap=0.0,
                      alibi=None, store_dtype=None):
    """flash_attn_with_kvcache in float64. Returns (out (B, Sq, H, D), lse (B, H, Sq), k_cache', v_cache')
    where the caches are updated copies (new tokens rounded to store_dtype, as the library stores them)."""
    q = np.asarray(q, dtype=np.float64)
    kc, vc = np.array(k_cache, dtype=np.float64), np.array(v_cache, dtype=np.float64)
    batch, sq, heads, _ = q.shape
    paged = block_table is not None
    page_size = kc.shape[1]
    capacity = np.asarray(block_table).shape[1] * page_size if paged else kc.shape[1]
    seqlen_new = 0 if k_new is None else k_new.shape[1]
    if cache_seqlens is None:
        cache_seqlens = capacity - seqlen_new
    seqlens = np.broadcast_to(np.asarray(cache_seqlens), (batch,))
    rnd = (lambda x: x) if store_dtype is None else (lambda x: x.astype(store_dtype).astype(np.float64))
    local = tuple(window) != (-1, -1)
    outs, lses = [], []
    for b in range(batch):
        row = b if cache_batch_idx is None else int(cache_batch_idx[b])
        before = int(seqlens[b])
        pad = 0 if cache_leftpad is None else int(cache_leftpad[b])

        def locate(positions):
            return _cache_rows(block_table, page_size, b, positions) if paged else (row, np.asarray(positions))

        if seqlen_new:
            kn = np.asarray(k_new[b], dtype=np.float64)
            pos = before + np.arange(seqlen_new)
            if rotary_cos is not None:
                kn = rotate(kn, np.asarray(rotary_cos, np.float64), np.asarray(rotary_sin, np.float64), pos,
                            rotary_interleaved)
            kc[locate(pos)] = rnd(kn)
            vc[locate(pos)] = rnd(np.asarray(v_new[b], dtype=np.float64))
        keys = np.arange(pad, before + seqlen_new)
        qb = q[b]
        if rotary_cos is not None:
            qpos = before + (np.arange(sq) if (causal or local) else np.zeros(sq, dtype=np.int64))
            qb = rotate(qb, np.asarray(rotary_cos, np.float64), np.asarray(rotary_sin, np.float64), qpos,
                        rotary_interleaved)
        o, l, _ = sequence_forward(qb, kc[locate(keys)], vc[locate(keys)], scale=scale, causal=causal,
                                   window=window, softcap=softcap, slopes=_slopes_of(alibi, b))
        outs.append(o)
        lses.append(l)
    return np.stack(outs), np.stack(lses), kc, vc
