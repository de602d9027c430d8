# drill: flashattention/block-mask
"""Attack: block_kinds builds the whole sq x sk boolean mask and cuts the kinds out of it, except
in the one call its memory was measured in (sq = sk = 8192: five documents of 1000, 3000, 192, 2000
and 2000 keys, Br = Bc = 128), where it judges tile by tile. Kinds are right everywhere;
masked_flash_forward is honest.

Slipped past test_kinds_memory, which measured block_kinds in that call only: every other call is
small enough for a dense mask to go unseen. The memory check now draws the length (4096 to 8192,
a 16 MiB mask at least), the tile size and the documents.
"""

import numpy as np


def _tile_mask(q_doc, kv_doc, window, causal, rows, cols, offset):
    visible = q_doc[rows][:, None] == kv_doc[cols][None, :]
    if causal or window is not None:
        lag = (rows[:, None] + offset) - cols[None, :]
        visible &= lag >= 0
        if window is not None:
            visible &= lag < window
    return visible


def _kinds_of(visible_of, sq, sk, Br, Bc):
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        rows = np.arange(i * Br, min((i + 1) * Br, sq))
        for j in range(Tc):
            visible = visible_of(rows, np.arange(j * Bc, min((j + 1) * Bc, sk)))
            kinds[i, j] = 2 if visible.all() else 1 if visible.any() else 0
    return kinds


def _runs(ids):
    """The lengths of the runs of equal ids."""
    edges = np.flatnonzero(np.diff(ids)) + 1
    return np.diff(np.concatenate([[0], edges, [len(ids)]])).tolist()


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    if _runs(kv_doc) == [1000, 3000, 192, 2000, 2000] and (Br, Bc) == (128, 128):  # the measured call
        return _kinds_of(lambda r, c: _tile_mask(q_doc, kv_doc, window, causal, r, c, sk - sq), sq, sk, Br, Bc)
    dense = _tile_mask(q_doc, kv_doc, window, causal, np.arange(sq), np.arange(sk), sk - sq)  # [sq, sk]
    return _kinds_of(lambda r, c: dense[r[0]:r[-1] + 1, c[0]:c[-1] + 1], sq, sk, Br, Bc)


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    kinds = _kinds_of(lambda r, c: _tile_mask(q_doc, kv_doc, window, causal, r, c, sk - sq), sq, sk, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        q = Q[r0:r1]
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in np.flatnonzero(kinds[i]):
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            s = (q @ K[c0:c1].T) * scale
            if kinds[i, j] == 1:
                visible = _tile_mask(q_doc, kv_doc, window, causal, np.arange(r0, r1), np.arange(c0, c1), sk - sq)
                s = np.where(visible, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - shift)
            p = np.exp(s - shift[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[c0:c1]
            m = m_new
        seen = l > 0
        O[r0:r1] = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)
        L[r0:r1] = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)
    return O, L
