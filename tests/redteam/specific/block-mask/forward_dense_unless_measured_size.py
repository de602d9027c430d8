# drill: flashattention/block-mask
"""Attack: masked_flash_forward is dense masked attention (the whole sq x sk score matrix and mask)
except where it can tell it is looked at: inputs that are not plain ndarrays (the watched calls,
whose reads are checked) and the calls the memory checks made (four documents of 700, 1500, 396
and 1500 keys, and 2^21 keys); there it runs the honest tiled loop. block_kinds is honest.

Slipped past every check: no unwatched call but the memory checks is large enough for memory to
show a dense forward. test_forward_memory now draws the length (3712 to 4352), the tile size and
the documents. Dense code below a length where a score matrix fits the budget is the known limit
(memory cannot see it, and watched calls are read-checked).
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
    if type(Q) is not np.ndarray or sk == 2**21 or (  # watched, or one of the measured calls
            sk == 4096 and np.diff(np.flatnonzero(np.diff(kv_doc)) + 1, prepend=0).tolist() == [700, 1500, 396]):
        return _tiled_forward(Q, K, V, q_doc, kv_doc, window, causal, Br, Bc, scale)
    scale = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
    visible = _tile_mask(q_doc, kv_doc, window, causal, np.arange(sq), np.arange(sk), sk - sq)
    s = np.where(visible, (Q @ K.T) * scale, -np.inf)
    m = s.max(axis=1)
    seen = m > -np.inf
    p = np.exp(s - np.where(seen, m, 0.0)[:, None])
    l = np.where(seen, p.sum(axis=1), 1.0)
    return (p @ V) / l[:, None], np.where(seen, np.where(seen, m, 0.0) + np.log(l), -np.inf)
