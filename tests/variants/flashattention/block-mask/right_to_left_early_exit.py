# drill: flashattention/block-mask
# variant: key tiles visited right to left, query blocks with no live tile skipped before any read; the running max's shift guarded with np.isfinite; results written through boolean row selections of O and L views; kinds from an index-arithmetic helper per tile
"""Honest variant: reverse inner loop order, early exit for dead query blocks, isfinite-guarded shifts."""

import math

import numpy as np


def _visible(q_doc, kv_doc, r0, r1, c0, c1, window, causal, offset):
    same = q_doc[r0:r1, None] == kv_doc[None, c0:c1]
    if not causal and window is None:
        return same
    lag = np.arange(r0, r1)[:, None] + offset - np.arange(c0, c1)[None, :]
    ok = lag >= 0
    if window is not None:
        ok &= lag < window
    return same & ok


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = (sq + Br - 1) // Br, (sk + Bc - 1) // Bc
    kinds = np.empty((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        for j in range(Tc):
            vis = _visible(q_doc, kv_doc, i * Br, min(sq, i * Br + Br), j * Bc, min(sk, j * Bc + Bc),
                           window, causal, sk - sq)
            kinds[i, j] = 0 if not vis.any() else (2 if vis.all() else 1)
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, (i + 1) * Br)
        live = np.flatnonzero(kinds[i])[::-1]
        if live.size == 0:
            continue
        q = Q[r0:r1]
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in live:
            c0, c1 = j * Bc, min(sk, (j + 1) * Bc)
            s = q @ K[c0:c1].T * scale
            if kinds[i, j] == 1:
                s = np.where(_visible(q_doc, kv_doc, r0, r1, c0, c1, window, causal, sk - sq), s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            shift = np.where(np.isfinite(m_new), m_new, 0.0)
            p = np.exp(s - shift[:, None])  # masked scores: exp(-inf) = 0
            alpha = np.where(np.isfinite(m), np.exp(m - shift), 0.0)
            l = l * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None] + p @ V[c0:c1]
            m = m_new
        hit = l > 0
        O[r0:r1][hit] = acc[hit] / l[hit, None]
        L[r0:r1][hit] = m[hit] + np.log(l[hit])
    return O, L
