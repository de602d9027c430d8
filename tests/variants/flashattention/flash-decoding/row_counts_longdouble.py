# drill: flashattention/flash-decoding
# variant: causal handled per chunk by each row's count of visible keys (rows that see none skipped, hidden keys cut off by slicing each row), statistics accumulated in np.longdouble, chunk size from math.ceil, keyword calls
"""Honest variant: per-row visible-key counts instead of a mask, extended-precision accumulators."""

import math

import numpy as np


def _one_chunk(q, Kc, Vc, lo, sk, causal, scale):
    sq = q.shape[0]
    width = Kc.shape[0]
    if causal:
        counts = np.clip(np.arange(sq) + (sk - sq) - lo + 1, 0, width)
    else:
        counts = np.full(sq, width)
    O = np.zeros((sq, Vc.shape[1]), dtype=np.longdouble)
    L = np.full(sq, -np.inf, dtype=np.longdouble)
    rows = np.flatnonzero(counts)
    if rows.size == 0:
        return O, L
    S = (q[rows].astype(np.longdouble) @ Kc.T.astype(np.longdouble)) * scale
    for k, r in enumerate(rows):
        s = S[k, : counts[r]]
        m = s.max()
        p = np.exp(s - m)
        l = p.sum()
        O[r] = p @ Vc[: counts[r]] / l
        L[r] = m + np.log(l)
    return O, L


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = len(K)
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    step = math.ceil(sk / num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c in range(num_splits):
        lo = c * step
        hi = min(lo + step, sk)
        if lo >= sk:
            break  # every later chunk is empty too
        O, L = _one_chunk(q, K[lo:hi], V[lo:hi], lo, sk, causal, scale)
        O_parts[c], L_parts[c] = O, L
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q=q, K=K, V=V, num_splits=num_splits, causal=causal, scale=scale)
    o = np.zeros(O_parts.shape[1:])
    lse = np.full(q.shape[0], -np.inf)
    for r in range(q.shape[0]):
        Ls = L_parts[:, r]
        keep = Ls > -np.inf
        if not keep.any():
            continue
        m = Ls[keep].max()
        w = np.exp(Ls[keep] - m)
        o[r] = w @ O_parts[keep, r] / w.sum()
        lse[r] = m + math.log(w.sum())
    return o, lse
