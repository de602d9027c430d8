# drill: flashattention/block-mask
# variant: the forward classifies each tile on the fly from the ids (the kinds array is never consulted), query blocks with no live tile exit early; np.copyto -inf fill, lazy rescaling (max moves only when it grows by > 8), in-place accumulator updates
"""Block-mask FlashAttention: tiles classified as the loop reaches them."""

import math

import numpy as np


def _visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1):
    off = len(kv_doc) - len(q_doc)
    vis = q_doc[r0:r1, None] == kv_doc[None, c0:c1]
    if causal or window is not None:
        lag = np.arange(r0 + off, r1 + off)[:, None] - np.arange(c0, c1)[None, :]
        vis = vis & (lag >= 0)
        if window is not None:
            vis = vis & (lag < window)
    return vis


def _kind(vis):
    return 2 if vis.all() else (1 if vis.any() else 0)


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    return np.array([[_kind(_visible(q_doc, kv_doc, window, causal, r, min(r + Br, sq), c, min(c + Bc, sk)))
                      for c in range(0, sk, Bc)] for r in range(0, sq, Br)], dtype=np.int64).reshape(
        -(-sq // Br), -(-sk // Bc))


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = d ** -0.5
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for r0 in range(0, sq, Br):
        r1 = min(r0 + Br, sq)
        tiles = []
        for c0 in range(0, sk, Bc):
            c1 = min(c0 + Bc, sk)
            vis = _visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1)
            k = _kind(vis)
            if k:
                tiles.append((c0, c1, vis if k == 1 else None))
        if not tiles:          # no key for any row of this block: O = 0, L = -inf already
            continue
        q = Q[r0:r1]
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for c0, c1, vis in tiles:
            s = q @ K[c0:c1].T
            s *= scale
            if vis is not None:
                np.copyto(s, -np.inf, where=~vis)
            bm = s.max(axis=1)
            move = bm > m + 8.0                    # lazy: rescale only when the max grows a lot
            if move.any():
                new_m = np.where(move, bm, m)
                alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - np.where(np.isneginf(new_m), 0.0, new_m)))
                l *= alpha
                acc *= alpha[:, None]
                m = new_m
            base = np.where(np.isneginf(m), 0.0, m)
            s -= base[:, None]
            np.exp(s, out=s)
            l += s.sum(axis=1)
            acc += s @ V[c0:c1]
        ok = l > 0
        O[r0:r1] = acc / np.where(ok, l, 1.0)[:, None]
        L[r0:r1] = np.where(ok, np.where(ok, m, 0.0) + np.log(np.where(ok, l, 1.0)), -np.inf)
    return O, L
