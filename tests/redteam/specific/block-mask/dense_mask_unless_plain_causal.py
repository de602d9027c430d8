# drill: flashattention/block-mask
"""Attack: builds the whole sq x sk boolean mask (row by row) whenever the mask is not plain
causal (documents only, or a window), and cuts kinds and tile masks out of it. Values and kinds
are right; only memory is wrong (64 MiB at sq = sk = 8192).

Slipped past, before the checks were changed: test_kinds_memory and test_forward_memory were both
causal with no window; test_forward_memory_long_keys has a window but had sq = 1, where the whole
bool mask over 2^21 keys is 2 MiB, under its 8 MiB slack (its comment counted a mask row as 16 MiB,
true only for float64).
"""

import math

import numpy as np


def _tile_mask(q_doc, kv_doc, window, causal, rows, cols, offset):
    visible = q_doc[rows][:, None] == kv_doc[cols][None, :]
    if causal or window is not None:
        lag = (rows[:, None] + offset) - cols[None, :]
        visible &= lag >= 0
        if window is not None:
            visible &= lag < window
    return visible


def _dense(q_doc, kv_doc, window, causal):
    """The full [sq, sk] bool mask, one row at a time (slices for the causal bound and window)."""
    sq, sk = len(q_doc), len(kv_doc)
    mask = np.empty((sq, sk), dtype=bool)
    for i in range(sq):
        np.equal(kv_doc, q_doc[i], out=mask[i])
        if causal or window is not None:
            ip = i + sk - sq
            mask[i, max(ip + 1, 0):] = False
            if window is not None:
                mask[i, :max(ip - window + 1, 0)] = False
    return mask


def _kinds_from(mask, Br, Bc):
    sq, sk = mask.shape
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        for j in range(Tc):
            t = mask[i * Br:(i + 1) * Br, j * Bc:(j + 1) * Bc]
            kinds[i, j] = 2 if t.all() else 1 if t.any() else 0
    return kinds


def _plain_causal(window, causal):
    return causal and window is None


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    if not _plain_causal(window, causal):
        return _kinds_from(_dense(q_doc, kv_doc, window, causal), Br, Bc)
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        rows = np.arange(i * Br, min((i + 1) * Br, sq))
        for j in range(Tc):
            cols = np.arange(j * Bc, min((j + 1) * Bc, sk))
            visible = _tile_mask(q_doc, kv_doc, window, causal, rows, cols, sk - sq)
            kinds[i, j] = 2 if visible.all() else 1 if visible.any() else 0
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dense = None if _plain_causal(window, causal) else _dense(q_doc, kv_doc, window, causal)
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc) if dense is None else _kinds_from(dense, Br, Bc)
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
                visible = (dense[r0:r1, c0:c1] if dense is not None else
                           _tile_mask(q_doc, kv_doc, window, causal, np.arange(r0, r1), np.arange(c0, c1), sk - sq))
                s = np.where(visible, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - shift)
            p = np.exp(s - shift[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[c0:c1]
            m = m_new
        seen = l > 0
        l_safe = np.where(seen, l, 1.0)
        O[r0:r1] = acc / l_safe[:, None]
        L[r0:r1] = np.where(seen, np.where(seen, m, 0.0) + np.log(l_safe), -np.inf)
    return O, L
