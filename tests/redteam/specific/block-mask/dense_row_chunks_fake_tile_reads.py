# drill: flashattention/block-mask
"""Attack: masked_flash_forward is dense masked attention, 16 query rows at a time (as
tests/redteam/specific/block-mask/dense_row_chunks.py), PLUS a dummy loop that first slices
Q[i:i+Br], K[j:j+Bc], V[j:j+Bc] for exactly the non-empty tiles (from block_kinds, Q blocks
outside), so the read log looks like a perfect block-skipping FA2 loop; the real work then runs
on np.asarray views, which log nothing.

Fakes: tiling, empty-tile skipping, unmasked full tiles and the online softmax (every empty tile's
scores are computed and masked; one full softmax per 16-row chunk).
Slipped past, before the long-K memory check, test_skips_empty_tiles (check_reads_seen: every row read through the arrays, in blocks
of Br/Bc; Q/K row counts equal to the non-empty tiles' widths), test_full_tiles_unmasked (the
masks are [16, sk] and go through np.copyto), test_forward_memory (0.5 MiB of scores per chunk).
"""
import math

import numpy as np

CHUNK = 16


def _mask(q_doc, kv_doc, rows, sq, sk, window, causal, cols=None):
    cols = slice(0, sk) if cols is None else cols
    vis = q_doc[rows][:, None] == kv_doc[cols][None, :]
    if causal or window is not None:
        lag = (np.arange(rows.start, rows.stop)[:, None] + (sk - sq)) - np.arange(cols.start, cols.stop)[None, :]
        vis &= lag >= 0
        if window is not None:
            vis &= lag < window
    return vis


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        for j in range(Tc):
            t = _mask(q_doc, kv_doc, slice(i * Br, min((i + 1) * Br, sq)), sq, sk, window, causal,
                      slice(j * Bc, min((j + 1) * Bc, sk)))
            kinds[i, j] = 2 if t.all() else 1 if t.any() else 0
    return kinds


def _touch(Q, K, V, kinds, Br, Bc):
    sq, sk = Q.shape[0], K.shape[0]
    for i in range(kinds.shape[0]):
        Q[i * Br:min((i + 1) * Br, sq)]
        for j in np.flatnonzero(kinds[i]):
            K[j * Bc:min((j + 1) * Bc, sk)]
            V[j * Bc:min((j + 1) * Bc, sk)]


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    _touch(Q, K, V, block_kinds(q_doc, kv_doc, window, causal, Br, Bc), Br, Bc)
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)   # plain views: no read is logged
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for a in range(0, sq, CHUNK):
        rows = slice(a, min(a + CHUNK, sq))
        vis = _mask(q_doc, kv_doc, rows, sq, sk, window, causal)
        S = (Q[rows] @ K.T) * scale            # [16, sk]: every tile, empty ones too
        np.copyto(S, -np.inf, where=~vis)
        m = S.max(axis=1)
        seen = m > -np.inf
        shift = np.where(seen, m, 0.0)
        P = np.exp(S - shift[:, None])
        l = P.sum(axis=1)
        ls = np.where(seen, l, 1.0)
        O[rows] = (P @ V) / ls[:, None]
        L[rows] = np.where(seen, shift + np.log(ls), -np.inf)
    return O, L
