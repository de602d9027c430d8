# drill: flashattention/block-mask
# planted: document ranges found by np.searchsorted, which assumes the ids are sorted
# expect-fail: Document ids are labels, not positions
"""Planted mistake: document ranges found by np.searchsorted, which assumes sorted ids."""

import math

import numpy as np


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        rows = np.arange(i * Br, min((i + 1) * Br, sq))
        # each row's document occupies keys lo .. hi - 1 (true only when ids increase along the keys)
        lo = np.searchsorted(kv_doc, q_doc[rows], side="left")
        hi = np.searchsorted(kv_doc, q_doc[rows], side="right")
        for j in range(Tc):
            cols = np.arange(j * Bc, min((j + 1) * Bc, sk))
            visible = (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])
            if causal or window is not None:
                lag = (rows[:, None] + sk - sq) - cols[None, :]
                visible &= lag >= 0
                if window is not None:
                    visible &= lag < window
            kinds[i, j] = 2 if visible.all() else 1 if visible.any() else 0
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        rows = np.arange(r0, r1)
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in np.flatnonzero(kinds[i]):
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            cols = np.arange(c0, c1)
            s = (Q[r0:r1] @ K[c0:c1].T) * scale
            if kinds[i, j] == 1:
                visible = q_doc[rows][:, None] == kv_doc[cols][None, :]
                if causal or window is not None:
                    lag = (rows[:, None] + sk - sq) - cols[None, :]
                    visible &= lag >= 0
                    if window is not None:
                        visible &= lag < window
                s = np.where(visible, s, -np.inf)
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
