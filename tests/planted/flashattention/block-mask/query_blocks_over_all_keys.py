# drill: flashattention/block-mask
# planted: each block of query rows is scored against every key and masked: no tile is skipped
# expect-fail: Peak memory with 16 query rows against about 2^21 keys
# expect-fail: No score tile is computed for an empty block
"""Planted mistake: the mask is applied to whole rows of scores, a block of queries at a time."""

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


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    """Query blocks against all of K at once: right values, but a [Br, sk] row of scores per block."""
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for r0 in range(0, sq, Br):
        rows = np.arange(r0, min(sq, r0 + Br))
        visible = _tile_mask(q_doc, kv_doc, window, causal, rows, np.arange(sk), sk - sq)
        s = np.where(visible, (Q[rows] @ K.T) * scale, -np.inf)
        top = s.max(axis=1)
        seen = top > -np.inf
        p = np.exp(s - np.where(seen, top, 0.0)[:, None])
        total = p.sum(axis=1)
        safe = np.where(seen, total, 1.0)
        O[rows] = (p @ V) / safe[:, None]
        L[rows] = np.where(seen, top + np.log(safe), -np.inf)
    return O, L
