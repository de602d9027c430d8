# drill: flashattention/block-mask
# planted: the whole sq×sk mask is built once and every tile is cut out of it
# expect-fail: block_kinds at sq = sk = 4096 to 8192 never builds an sq×sk mask
# expect-fail: Peak memory at sq = sk of 3712 to 4352
"""Planted mistake: the whole sq×sk mask is built once and every tile is cut out of it."""

import math

import numpy as np


def _dense(q_doc, kv_doc, window, causal):
    sq, sk = len(q_doc), len(kv_doc)
    visible = np.equal.outer(q_doc, kv_doc)  # [sq, sk]
    if causal or window is not None:
        lag = (np.arange(sq)[:, None] + sk - sq) - np.arange(sk)[None, :]
        visible &= lag >= 0
        if window is not None:
            visible &= lag < window
    return visible


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    mask = _dense(q_doc, kv_doc, window, causal)
    sq, sk = mask.shape
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        for j in range(Tc):
            tile = mask[i * Br:(i + 1) * Br, j * Bc:(j + 1) * Bc]
            kinds[i, j] = 2 if tile.all() else 1 if tile.any() else 0
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    mask = _dense(q_doc, kv_doc, window, causal)
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in np.flatnonzero(kinds[i]):
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            s = (Q[r0:r1] @ K[c0:c1].T) * scale
            if kinds[i, j] == 1:
                s = np.where(mask[r0:r1, c0:c1], s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - shift)
            p = np.exp(s - shift[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[c0:c1]
            m = m_new
        seen = l > 0
        l_safe = np.where(seen, l, 1.0)
        O[r0:r1] = acc / l_safe[:, None]
        L[r0:r1] = np.where(seen, np.where(seen, m, 0.0) + np.log(l_safe), -np.inf)
    return O, L
