# drill: flashattention/block-mask
# variant: kinds from per-tile document sets and corner lags (no per-pair mask); K/V blocks in the outer loop
"""Honest variant: kinds decided from each tile's document ids and its extreme lags; FA1 loop order.

A tile is empty when its rows and keys share no document or every lag is out of range, and
full when rows and keys hold one and the same document and the smallest and largest lags
are both in range. The forward keeps running statistics for every row and visits the
non-empty tiles key block by key block.
"""

import math

import numpy as np


def _lags_ok(lo, hi, window, causal):
    """(every lag in range, some lag in range) for lags lo .. hi."""
    if not causal and window is None:
        return True, True
    top = math.inf if window is None else window - 1
    return lo >= 0 and hi <= top, hi >= 0 and lo <= top


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    kinds = np.zeros((-(-sq // Br), -(-sk // Bc)), dtype=np.int64)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        row_docs = np.unique(q_doc[r0:r1])
        for j in range(kinds.shape[1]):
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            col_docs = np.unique(kv_doc[c0:c1])
            lo, hi = (r0 + sk - sq) - (c1 - 1), (r1 - 1 + sk - sq) - c0
            all_lags, some_lags = _lags_ok(lo, hi, window, causal)
            shared = np.intersect1d(row_docs, col_docs)
            if not some_lags or shared.size == 0:
                continue
            one_doc = row_docs.size == 1 and col_docs.size == 1 and shared.size == 1
            if one_doc and all_lags:
                kinds[i, j] = 2
                continue
            rows, cols = np.arange(r0, r1), np.arange(c0, c1)
            visible = q_doc[r0:r1, None] == kv_doc[None, c0:c1]
            if causal or window is not None:
                lag = rows[:, None] + sk - sq - cols[None, :]
                visible &= (lag >= 0) & ((lag < window) if window is not None else True)
            kinds[i, j] = 2 if visible.all() else 1 if visible.any() else 0
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    m = np.full(sq, -np.inf)
    l = np.zeros(sq)
    acc = np.zeros((sq, V.shape[1]))
    for j in range(kinds.shape[1]):  # K/V blocks outside
        c0, c1 = j * Bc, min((j + 1) * Bc, sk)
        k, v = K[c0:c1], V[c0:c1]
        for i in np.flatnonzero(kinds[:, j]):
            r0, r1 = i * Br, min((i + 1) * Br, sq)
            s = Q[r0:r1] @ k.T * scale
            if kinds[i, j] == 1:
                lag = np.arange(r0, r1)[:, None] + sk - sq - np.arange(c0, c1)[None, :]
                ok = q_doc[r0:r1, None] == kv_doc[None, c0:c1]
                if causal or window is not None:
                    ok &= lag >= 0
                if window is not None:
                    ok &= lag < window
                s[~ok] = -np.inf
            m_new = np.maximum(m[r0:r1], s.max(axis=1))
            base = np.where(np.isinf(m_new), 0.0, m_new)
            alpha = np.exp(m[r0:r1] - base)
            p = np.exp(s - base[:, None])
            l[r0:r1] = alpha * l[r0:r1] + p.sum(axis=1)
            acc[r0:r1] = alpha[:, None] * acc[r0:r1] + p @ v
            m[r0:r1] = m_new
    seen = l > 0
    O = np.zeros_like(acc)
    O[seen] = acc[seen] / l[seen, None]
    L = np.full(sq, -np.inf)
    L[seen] = m[seen] + np.log(l[seen])
    return O, L
