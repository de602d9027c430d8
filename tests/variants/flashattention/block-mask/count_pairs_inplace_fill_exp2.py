# drill: flashattention/block-mask
# variant: kinds from np.count_nonzero of each tile's visible pairs (a small helper class per tile), forward in base 2 with the scale folded into a copy of the Q block and the mask applied by an in-place -inf fill (s[~vis] = -inf), no np.where
"""Block-mask FlashAttention: counted tile kinds, base-2 online softmax."""

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


class Tile:
    def __init__(self, q_doc, kv_doc, window, causal, r0, r1, c0, c1):
        rows = np.arange(r0, r1) + (len(kv_doc) - len(q_doc))   # bottom-right aligned i'
        cols = np.arange(c0, c1)
        vis = np.equal.outer(q_doc[r0:r1], kv_doc[c0:c1])
        if causal or window is not None:
            lag = rows[:, None] - cols[None, :]
            vis &= lag >= 0
            if window is not None:
                vis &= lag < window
        self.visible = vis

    def kind(self):
        n = np.count_nonzero(self.visible)
        return 0 if n == 0 else 2 if n == self.visible.size else 1


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = math.ceil(sq / Br), math.ceil(sk / Bc)
    kinds = np.empty((Tr, Tc), dtype=np.int8)
    for i in range(Tr):
        for j in range(Tc):
            kinds[i, j] = Tile(q_doc, kv_doc, window, causal, i * Br, min(sq, (i + 1) * Br),
                               j * Bc, min(sk, (j + 1) * Bc)).kind()
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk, dv = V.shape
    scale = 1 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, dv))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, (i + 1) * Br)
        q = Q[r0:r1] * (scale * LOG2E)            # a copy: the caller's Q is untouched
        m2 = np.full(r1 - r0, -np.inf)             # running max, base 2
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, dv))
        for j in range(kinds.shape[1]):
            if kinds[i, j] == 0:
                continue
            c0, c1 = j * Bc, min(sk, (j + 1) * Bc)
            s = q @ K[c0:c1].T
            if kinds[i, j] == 1:
                s[~Tile(q_doc, kv_doc, window, causal, r0, r1, c0, c1).visible] = -np.inf
            m_new = np.maximum(m2, s.max(axis=1))
            ref = np.where(np.isneginf(m_new), 0.0, m_new)
            alpha = np.exp2(m2 - ref)
            p = np.exp2(s - ref[:, None])
            l = l * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None] + p @ V[c0:c1]
            m2 = m_new
        hit = l > 0
        O[r0:r1][hit] = acc[hit] / l[hit, None]
        L[r0:r1][hit] = (m2[hit] + np.log2(l[hit])) / LOG2E
    return O, L
