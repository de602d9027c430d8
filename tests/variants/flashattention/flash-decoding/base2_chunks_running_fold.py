# drill: flashattention/flash-decoding
# variant: each chunk's statistics in base 2 (exp2 on log2(e)-scaled scores, L converted back to natural log); flash_decode folds the partials one chunk at a time into a running (o, lse) with np.logaddexp
"""Split-KV decoding with base-2 chunk softmaxes and a running logaddexp merge."""

import math

import numpy as np

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    width = math.ceil(sk / num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    q2 = q * (scale * LOG2E)                      # base-2 scores straight out of the matmul
    last_visible = np.arange(sq) + (sk - sq)      # row i sees keys 0 .. i + sk - sq
    for c in range(num_splits):
        lo, hi = c * width, min(sk, (c + 1) * width)
        if hi <= lo:
            continue
        t = q2 @ K[lo:hi].T
        if causal:
            t[np.arange(lo, hi)[None, :] > last_visible[:, None]] = -np.inf  # t is our own array
        m2 = t.max(axis=1)
        live = np.isfinite(m2)
        if not live.any():
            continue
        w = np.exp2(t[live] - m2[live, None])
        tot = w.sum(axis=1)
        O_parts[c, live] = (w @ V[lo:hi]) / tot[:, None]
        L_parts[c, live] = (m2[live] + np.log2(tot)) * LN2
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    o = np.zeros(O_parts.shape[1:])
    lse = np.full(L_parts.shape[1], -np.inf)
    for O_c, L_c in zip(O_parts, L_parts):
        new = np.logaddexp(lse, L_c)               # -inf only where nothing has been seen yet
        anchor = np.where(np.isneginf(new), 0.0, new)
        o = np.exp(lse - anchor)[:, None] * o + np.exp(L_c - anchor)[:, None] * O_c
        lse = new
    return o, lse
