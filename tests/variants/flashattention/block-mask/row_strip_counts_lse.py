# drill: flashattention/block-mask
# variant: kinds from strips of one query tile by eight key tiles, visible pairs counted per key tile with np.add.reduceat and compared with the tile's area; forward keeps a per-row logsumexp and normalised output merged with np.logaddexp
"""Honest variant: visible-pair counts over strips of tiles for the kinds; an lse-tracking tiled forward."""

import math

import numpy as np


def _visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1, offset):
    """Bool [r1 - r0, c1 - c0]: the visible pairs of rows r0..r1-1 and keys c0..c1-1 (bool ops only)."""
    rows = np.arange(r0, r1) + offset       # i' for each row
    cols = np.arange(c0, c1)
    vis = q_doc[r0:r1, None] == kv_doc[None, c0:c1]
    if causal or window is not None:
        vis &= cols[None, :] <= rows[:, None]                   # 0 <= i' - j
        if window is not None:
            vis &= cols[None, :] > (rows - window)[:, None]     # i' - j < window
    return vis


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = math.ceil(sq / Br), math.ceil(sk / Bc)
    starts = np.arange(0, sk, Bc)
    widths = np.minimum(starts + Bc, sk) - starts
    kinds = np.empty((Tr, Tc), dtype=np.int64)
    group = 8  # key tiles judged together: a strip of Br rows by 8·Bc keys, never all sk keys at once
    for i in range(Tr):
        r0, r1 = i * Br, min(sq, (i + 1) * Br)
        for t0 in range(0, Tc, group):
            t1 = min(Tc, t0 + group)
            c0, c1 = t0 * Bc, min(sk, t1 * Bc)
            strip = _visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1, sk - sq)  # [<= Br, <= 8·Bc] booleans
            count = np.add.reduceat(strip.sum(axis=0), starts[t0:t1] - c0)            # visible pairs per key tile
            area = (r1 - r0) * widths[t0:t1]
            kinds[i, t0:t1] = np.select([count == area, count > 0], [2, 1], default=0)
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i, row_kinds in enumerate(kinds):
        r0, r1 = i * Br, min(sq, (i + 1) * Br)
        q = Q[r0:r1]
        lse = np.full(r1 - r0, -np.inf)   # logsumexp of the scores seen so far
        out = np.zeros((r1 - r0, V.shape[1]))  # their softmax-weighted values, normalised
        for j in np.nonzero(row_kinds)[0]:
            c0, c1 = j * Bc, min(sk, (j + 1) * Bc)
            s = q @ K[c0:c1].T * scale
            if row_kinds[j] == 1:
                s = np.where(_visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1, sk - sq), s, -np.inf)
            top = s.max(axis=1)
            hit = top > -np.inf
            top0 = np.where(hit, top, 0.0)          # rows with nothing visible here: e = exp(-inf) = 0
            e = np.exp(s - top0[:, None])
            tot = e.sum(axis=1)
            tot1 = np.where(hit, tot, 1.0)
            blk_lse = np.where(hit, top0 + np.log(tot1), -np.inf)
            blk_out = (e @ V[c0:c1]) / tot1[:, None]
            new_lse = np.logaddexp(lse, blk_lse)    # -inf where neither has seen a key
            ref = np.where(new_lse > -np.inf, new_lse, 0.0)
            out = np.exp(lse - ref)[:, None] * out + np.exp(blk_lse - ref)[:, None] * blk_out
            lse = new_lse
        O[r0:r1] = out
        L[r0:r1] = lse
    return O, L
