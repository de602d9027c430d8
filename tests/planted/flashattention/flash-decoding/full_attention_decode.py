# drill: flashattention/flash-decoding
# planted: flash_decode is plain attention over the whole cache, row by row; it never uses the partials
# expect-fail: K and V are read a chunk at a time
"""Planted mistake: flash_decode computes full attention directly; the values are right, the split is missing."""

import math

import numpy as np


def _attend_rows(q, K, V, causal, scale):
    sq, sk = q.shape[0], K.shape[0]
    o = np.zeros((sq, V.shape[1]))
    lse = np.full(sq, -np.inf)
    for i in range(sq):
        hi = i + sk - sq + 1 if causal else sk   # keys this row may see
        if hi <= 0:
            continue
        s = (K[:hi] @ q[i]) * scale               # one row of scores over the whole cache
        m = s.max()
        p = np.exp(s - m)
        l = p.sum()
        o[i] = (p @ V[:hi]) / l
        lse[i] = m + np.log(l)
    return o, lse


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    size = -(-sk // num_splits)
    O = np.zeros((num_splits, sq, V.shape[1]))
    L = np.full((num_splits, sq), -np.inf)
    for c in range(num_splits):
        a, b = min(c * size, sk), min((c + 1) * size, sk)
        if a >= b:
            continue
        S = (q @ K[a:b].T) * scale
        if causal:
            vis = np.arange(a, b)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
            S = np.where(vis, S, -np.inf)
        m = S.max(axis=1)
        seen = m > -np.inf
        sh = np.where(seen, m, 0.0)
        P = np.exp(S - sh[:, None])
        l = np.where(seen, P.sum(axis=1), 1.0)
        O[c] = (P @ V[a:b]) / l[:, None]
        L[c] = np.where(seen, sh + np.log(l), -np.inf)
    return O, L


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    return _attend_rows(q, K, V, causal, scale)     # num_splits ignored: no split, no merge
