# drill: flashattention/block-mask
# variant: K/V blocks memoised as views the first time a live tile needs them (reused by later query blocks); the scale folded into a copy of each K block; the mask added as a 0/-inf bias on partial tiles; kinds int32 from np.select
"""Honest variant: lazily memoised K/V block views, scaled K copy, additive -inf bias mask."""

import math

import numpy as np


def _pairs(q_doc, kv_doc, rows, cols, window, causal, offset):
    vis = np.equal.outer(q_doc[rows.start:rows.stop], kv_doc[cols.start:cols.stop])
    if causal or window is not None:
        lag = np.subtract.outer(np.arange(rows.start, rows.stop) + offset, np.arange(cols.start, cols.stop))
        vis &= (lag >= 0) & (lag < (window if window is not None else lag.max() + 1))
    return vis


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    out = np.zeros((Tr, Tc), dtype=np.int32)
    for i in range(Tr):
        rows = slice(i * Br, min(sq, (i + 1) * Br))
        for j in range(Tc):
            vis = _pairs(q_doc, kv_doc, rows, slice(j * Bc, min(sk, (j + 1) * Bc)), window, causal, sk - sq)
            out[i, j] = np.select([vis.all(), vis.any()], [2, 1], 0)
    return out


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1 / math.sqrt(d)
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    blocks = {}

    def kv_block(j):
        if j not in blocks:
            c0, c1 = j * Bc, min(sk, (j + 1) * Bc)
            blocks[j] = (K[c0:c1], V[c0:c1])
        return blocks[j]

    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i, row in enumerate(kinds):
        rows = slice(i * Br, min(sq, (i + 1) * Br))
        q = Q[rows]
        n = q.shape[0]
        m, l, acc = np.full(n, -np.inf), np.zeros(n), np.zeros((n, V.shape[1]))
        for j in np.nonzero(row)[0]:
            k, v = kv_block(j)
            s = q @ (k * scale).T
            if row[j] == 1:
                vis = _pairs(q_doc, kv_doc, rows, slice(j * Bc, j * Bc + k.shape[0]), window, causal, sk - sq)
                s = s + np.where(vis, 0.0, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            safe = np.where(m_new > -np.inf, m_new, 0.0)
            p = np.exp(s - safe[:, None])
            a = np.exp(m - safe)
            l = a * l + p.sum(axis=1)
            acc = a[:, None] * acc + p @ v
            m = m_new
        got = l > 0
        O[rows] = acc / np.where(got, l, 1.0)[:, None]
        L[rows] = np.where(got, np.where(got, m, 0.0) + np.log(np.where(got, l, 1.0)), -np.inf)
    return O, L
