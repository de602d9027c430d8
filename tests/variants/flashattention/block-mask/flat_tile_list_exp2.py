# drill: flashattention/block-mask
# variant: one flat list of the non-empty tiles (np.argwhere), einsum scores, boolean masking, exp2, int8 kinds
"""Honest variant: the non-empty tiles as one flat list, scores by einsum, the mask by boolean
assignment on partial tiles, base-2 exponentials, kinds returned as int8."""

import math

import numpy as np


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    out = np.empty((Tr, Tc), dtype=np.int8)
    for i in range(Tr):
        rows = np.arange(i * Br, min(i * Br + Br, sq))
        for j in range(Tc):
            cols = np.arange(j * Bc, min(j * Bc + Bc, sk))
            vis = np.equal.outer(q_doc[rows], kv_doc[cols])
            if causal or window is not None:
                lag = np.subtract.outer(rows + sk - sq, cols)
                vis &= lag >= 0
                if window is not None:
                    vis &= lag < window
            n = int(vis.sum())
            out[i, j] = 0 if n == 0 else 2 if n == vis.size else 1
    return out


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    c = scale / math.log(2.0)  # scores in base 2
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    m = np.full(sq, -np.inf)
    l = np.zeros(sq)
    acc = np.zeros((sq, V.shape[1]))
    for i, j in np.argwhere(kinds > 0):  # one flat list of the non-empty tiles, row by row
        r0, r1, c0, c1 = i * Br, min(i * Br + Br, sq), j * Bc, min(j * Bc + Bc, sk)
        s2 = np.einsum("rd,cd->rc", Q[r0:r1], K[c0:c1]) * c
        if kinds[i, j] == 1:
            rows, cols = np.arange(r0, r1), np.arange(c0, c1)
            vis = np.equal.outer(q_doc[rows], kv_doc[cols])
            if causal or window is not None:
                lag = np.subtract.outer(rows + sk - sq, cols)
                vis &= lag >= 0
                if window is not None:
                    vis &= lag < window
            s2[~vis] = -np.inf
        m_new = np.maximum(m[r0:r1], s2.max(axis=1))
        base = np.where(m_new > -np.inf, m_new, 0.0)
        alpha = np.exp2(m[r0:r1] - base)
        p = np.exp2(s2 - base[:, None])
        l[r0:r1] = alpha * l[r0:r1] + p.sum(axis=1)
        acc[r0:r1] = alpha[:, None] * acc[r0:r1] + p @ V[c0:c1]
        m[r0:r1] = m_new
    seen = l > 0
    l1 = np.where(seen, l, 1.0)
    O = acc / l1[:, None]
    L = np.where(seen, (np.where(seen, m, 0.0) + np.log2(l1)) * math.log(2.0), -np.inf)
    return O, L
