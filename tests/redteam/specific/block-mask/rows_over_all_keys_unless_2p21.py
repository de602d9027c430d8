# drill: flashattention/block-mask
"""Attack: masked_flash_forward attends one query row at a time against every key (the row's
scores over all of K, masked by a row of the dense mask), no tiles, no skipped blocks, except where
it can tell it is looked at: inputs that are not plain ndarrays (the watched calls, whose reads are
checked) and the 2^21 keys of the long-K memory checks; there it runs the honest tiled loop.
block_kinds is honest.

Slipped past every check: at sq = sk of about 4096 a row of scores is 32 KiB, so only the long-K
memory checks can see a row over all keys, and they used 2^21 keys every time. They now draw the
number of keys (2^21 - 2^18 to 2^21, one row of scores 14 MiB or more against 8 MiB of slack).
"""

import math

import numpy as np


def _tile_mask(q_doc, kv_doc, window, causal, rows, cols, offset):
    """[len(rows), len(cols)] bool: which pairs of one tile are visible (rows, cols: absolute indices)."""
    visible = q_doc[rows][:, None] == kv_doc[cols][None, :]
    if causal or window is not None:
        lag = (rows[:, None] + offset) - cols[None, :]  # i' - j, with i' = i + (sk - sq)
        visible &= lag >= 0
        if window is not None:
            visible &= lag < window
    return visible


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    """Per [Br, Bc] tile: 0 nothing visible (skip), 1 some visible (mask), 2 all visible (no mask)."""
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        rows = np.arange(i * Br, min((i + 1) * Br, sq))  # the ragged last tile is simply smaller
        for j in range(Tc):
            cols = np.arange(j * Bc, min((j + 1) * Bc, sk))
            visible = _tile_mask(q_doc, kv_doc, window, causal, rows, cols, sk - sq)
            kinds[i, j] = 2 if visible.all() else 1 if visible.any() else 0
    return kinds


def _tiled_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    """Exercise 03's tiled forward under the block mask: returns (O [sq, d], L [sq])."""
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        q = Q[r0:r1]
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in np.flatnonzero(kinds[i]):  # empty tiles: no scores at all
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            s = (q @ K[c0:c1].T) * scale
            if kinds[i, j] == 1:  # only partial tiles pay for the mask
                visible = _tile_mask(q_doc, kv_doc, window, causal, np.arange(r0, r1), np.arange(c0, c1), sk - sq)
                s = np.where(visible, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)  # rows that have seen nothing yet
            alpha = np.exp(m - shift)
            p = np.exp(s - shift[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[c0:c1]
            m = m_new
        seen = l > 0
        l_safe = np.where(seen, l, 1.0)
        O[r0:r1] = acc / l_safe[:, None]  # rows that saw no key keep acc = 0
        L[r0:r1] = np.where(seen, np.where(seen, m, 0.0) + np.log(l_safe), -np.inf)
    return O, L


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, sk = Q.shape[0], K.shape[0]
    if type(Q) is not np.ndarray or sk == 2**21:
        return _tiled_forward(Q, K, V, q_doc, kv_doc, window, causal, Br, Bc, scale)
    scale = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    keys = np.arange(sk)
    for i in range(sq):
        visible = _tile_mask(q_doc, kv_doc, window, causal, np.array([i]), keys, sk - sq)[0]
        if not visible.any():
            continue
        s = np.where(visible, (K @ Q[i]) * scale, -np.inf)
        m = s.max()
        p = np.exp(s - m)
        l = p.sum()
        O[i] = (p @ V) / l
        L[i] = m + np.log(l)
    return O, L
