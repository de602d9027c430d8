# drill: flashattention/block-mask
# variant: a RowState class holds each query block's running (m, l, acc) and updates them in place; the Q block re-sliced for every tile inside the inner loop; mask by np.putmask on partial tiles; kinds from visible-pair counts compared with the tile's area
"""Honest variant: in-place running state in a small class, Q sliced per tile, np.putmask masking."""

import math

import numpy as np


def _tile_visible(q_doc, kv_doc, r0, r1, c0, c1, window, causal, offset):
    i = np.arange(r0, r1)[:, None] + offset
    j = np.arange(c0, c1)[None, :]
    vis = q_doc[r0:r1][:, None] == kv_doc[c0:c1][None, :]
    if causal or window is not None:
        vis = vis & (j <= i)
    if window is not None:
        vis = vis & (i - j < window)
    return vis


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    kinds = np.zeros((math.ceil(sq / Br), math.ceil(sk / Bc)), dtype=np.int64)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, i * Br + Br)
        for j in range(kinds.shape[1]):
            c0, c1 = j * Bc, min(sk, j * Bc + Bc)
            count = np.count_nonzero(_tile_visible(q_doc, kv_doc, r0, r1, c0, c1, window, causal, sk - sq))
            kinds[i, j] = 2 if count == (r1 - r0) * (c1 - c0) else int(count > 0)
    return kinds


class RowState:
    def __init__(self, n, dv):
        self.m = np.full(n, -np.inf)
        self.l = np.zeros(n)
        self.acc = np.zeros((n, dv))

    def update(self, s, v):
        m_new = np.maximum(self.m, s.max(axis=1))
        shift = m_new.copy()
        shift[shift == -np.inf] = 0.0
        s -= shift[:, None]
        np.exp(s, out=s)
        alpha = np.exp(self.m - shift)
        self.l *= alpha
        self.l += s.sum(axis=1)
        self.acc *= alpha[:, None]
        self.acc += s @ v
        self.m = m_new

    def finish(self):
        o = np.zeros_like(self.acc)
        lse = np.full(self.l.shape, -np.inf)
        ok = self.l > 0
        o[ok] = self.acc[ok] / self.l[ok, None]
        lse[ok] = self.m[ok] + np.log(self.l[ok])
        return o, lse


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc=q_doc, kv_doc=kv_doc, window=window, causal=causal, Br=Br, Bc=Bc)
    O = np.empty((sq, V.shape[1]))
    L = np.empty(sq)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, i * Br + Br)
        state = RowState(r1 - r0, V.shape[1])
        for j in range(kinds.shape[1]):
            kind = kinds[i, j]
            if kind == 0:
                continue
            c0, c1 = j * Bc, min(sk, j * Bc + Bc)
            s = np.matmul(Q[r0:r1], K[c0:c1].T)
            s *= scale
            if kind == 1:
                hidden = ~_tile_visible(q_doc, kv_doc, r0, r1, c0, c1, window, causal, sk - sq)
                np.putmask(s, hidden, -np.inf)
            state.update(s, V[c0:c1])
        O[r0:r1], L[r0:r1] = state.finish()
    return O, L
