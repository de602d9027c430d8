# drill: flashattention/block-mask
# variant: each tile's visibility composed with np.where (position rule as the condition, same-document test as the value, False elsewhere); the forward calls block_kinds and masks partial tiles by boolean assignment
"""Honest variant: tile masks composed from boolean pieces with np.where.

A learner who thinks "where the position rule holds, visibility is the document test,
elsewhere it is False" writes np.where(ok, same, False). That builds a boolean mask out of
two boolean masks: no score is touched, so it is not a mask applied to a tile.
"""

import math

import numpy as np


def _visible(q_doc, kv_doc, r0, r1, c0, c1, offset, window, causal):
    """[r1 - r0, c1 - c0] bool: which pairs of the tile may attend."""
    same = q_doc[r0:r1, None] == kv_doc[None, c0:c1]
    if not causal and window is None:
        return same
    lag = (np.arange(r0, r1)[:, None] + offset) - np.arange(c0, c1)[None, :]
    ok = lag >= 0
    if window is not None:
        ok = np.where(ok, lag < window, False)
    return np.where(ok, same, False)


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = math.ceil(sq / Br), math.ceil(sk / Bc)
    kinds = np.empty((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        r0, r1 = i * Br, min(sq, (i + 1) * Br)
        for j in range(Tc):
            c0, c1 = j * Bc, min(sk, (j + 1) * Bc)
            vis = _visible(q_doc, kv_doc, r0, r1, c0, c1, sk - sq, window, causal)
            kinds[i, j] = 2 if vis.all() else (1 if vis.any() else 0)
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, (i + 1) * Br)
        q = Q[r0:r1] * scale
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in range(kinds.shape[1]):
            kind = kinds[i, j]
            if kind == 0:
                continue
            c0, c1 = j * Bc, min(sk, (j + 1) * Bc)
            s = q @ K[c0:c1].T
            if kind == 1:
                s[~_visible(q_doc, kv_doc, r0, r1, c0, c1, sk - sq, window, causal)] = -np.inf
            m_new = np.maximum(m, s.max(axis=1))
            shift = m_new.copy()
            shift[np.isneginf(shift)] = 0.0  # rows that have seen nothing yet
            p = np.exp(s - shift[:, None])
            alpha = np.exp(m - shift)
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[c0:c1]
            m = m_new
        seen = l > 0
        O[r0:r1][seen] = acc[seen] / l[seen, None]
        L[r0:r1][seen] = m[seen] + np.log(l[seen])
    return O, L
