# drill: flashattention/block-mask
# variant: partial tiles handled with numpy.ma masked arrays (the hidden pairs masked, the row max taken on the masked tile, then the tile filled with -inf); a tile with no shared document id (np.isin) is empty before any position test; kinds int32
"""Honest variant: numpy's masked arrays for the partial tiles.

A full tile's scores are used as they are; a partial tile's scores become a masked array
whose hidden pairs take no part in the row max; it is then filled back with -inf for the
exponentials.
"""

import math

import numpy as np


def _hidden(q_doc, kv_doc, r0, r1, c0, c1, offset, window, causal):
    """[r1 - r0, c1 - c0] bool: True where the pair may NOT attend."""
    hidden = ~np.equal.outer(q_doc[r0:r1], kv_doc[c0:c1])
    if causal or window is not None:
        lag = np.subtract.outer(np.arange(r0, r1) + offset, np.arange(c0, c1))
        hidden |= lag < 0
        if window is not None:
            hidden |= lag >= window
    return hidden


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    kinds = np.zeros((-(-sq // Br), -(-sk // Bc)), dtype=np.int32)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min(sq, i * Br + Br)
        for j in range(kinds.shape[1]):
            c0, c1 = j * Bc, min(sk, j * Bc + Bc)
            if not np.isin(q_doc[r0:r1], kv_doc[c0:c1]).any():
                continue  # no shared document: empty whatever the positions say
            hidden = _hidden(q_doc, kv_doc, r0, r1, c0, c1, sk - sq, window, causal)
            kinds[i, j] = 0 if hidden.all() else (2 if not hidden.any() else 1)
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i, row_kinds in enumerate(kinds):
        r0, r1 = i * Br, min(sq, i * Br + Br)
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in np.nonzero(row_kinds)[0]:
            c0, c1 = j * Bc, min(sk, j * Bc + Bc)
            s = (Q[r0:r1] @ K[c0:c1].T) * scale
            if row_kinds[j] == 1:
                masked = np.ma.masked_array(s, mask=_hidden(q_doc, kv_doc, r0, r1, c0, c1, sk - sq, window, causal))
                tile_max = masked.max(axis=1).filled(-np.inf)
                # Filled before the exponentials: np.ma.exp would still exponentiate the hidden scores.
                s = masked.filled(-np.inf)
            else:
                tile_max = s.max(axis=1)
            m_new = np.maximum(m, tile_max)
            shift = np.where(m_new > -np.inf, m_new, 0.0)
            p = np.exp(s - shift[:, None])
            alpha = np.exp(m - shift)
            l = l * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None] + p @ V[c0:c1]
            m = m_new
        live = l > 0
        O[r0:r1][live] = acc[live] / l[live][:, None]
        L[r0:r1][live] = m[live] + np.log(l[live])
    return O, L
