# drill: flashattention/block-mask
# variant: tile masks from np.equal.outer / np.subtract.outer with kind = any + all; forward in base 2 with the scale folded into each Q block, empty rows guarded by flooring the running max at the most negative float (no where on the max)
"""Honest variant: outer-product tile masks, exp2 online softmax, a floored running max as the empty-row guard."""

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)
FLOOR = np.finfo(np.float64).min  # finite: exp2(-inf - FLOOR) = 0, never -inf - (-inf)


def _tile_visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1, offset):
    vis = np.equal.outer(q_doc[r0:r1], kv_doc[c0:c1])
    if causal or window is not None:
        lag = np.subtract.outer(np.arange(r0, r1) + offset, np.arange(c0, c1))  # i' - j
        vis &= lag >= 0
        if window is not None:
            vis &= lag < window
    return vis


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, sk = q_doc.shape[0], kv_doc.shape[0]
    Tr, Tc = (sq + Br - 1) // Br, (sk + Bc - 1) // Bc
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        for j in range(Tc):
            vis = _tile_visible(q_doc, kv_doc, window, causal, i * Br, min(sq, i * Br + Br),
                                j * Bc, min(sk, j * Bc + Bc), sk - sq)
            kinds[i, j] = int(vis.any()) + int(vis.all())  # 0 empty, 1 partial, 2 full
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, d = Q.shape
    sk, dv = K.shape[0], V.shape[1]
    scale = d ** -0.5 if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.empty((sq, dv))
    L = np.empty(sq)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, i * Br + Br)
        q2 = Q[r0:r1] * (scale * LOG2E)     # scores come out in base-2 units
        m2 = np.full(r1 - r0, FLOOR)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, dv))
        for j in np.flatnonzero(kinds[i] > 0):
            c0, c1 = j * Bc, min(sk, j * Bc + Bc)
            t = q2 @ K[c0:c1].T
            if kinds[i, j] == 1:
                t = np.where(_tile_visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1, sk - sq), t, -np.inf)
            m_new = np.maximum(m2, t.max(axis=1))  # stays at FLOOR while a row has seen nothing
            p = np.exp2(t - m_new[:, None])
            corr = np.exp2(m2 - m_new)
            l = corr * l + p.sum(axis=1)
            acc = corr[:, None] * acc + p @ V[c0:c1]
            m2 = m_new
        seen = l > 0
        denom = np.where(seen, l, 1.0)
        O[r0:r1] = acc / denom[:, None]
        L[r0:r1] = np.where(seen, (m2 + np.log2(denom)) / LOG2E, -np.inf)
    return O, L
