# drill: flashattention/block-mask
"""Attack: masked_flash_forward is dense masked attention, 16 query rows at a time.

Fakes: the tiled, block-skipping FlashAttention forward. It never calls block_kinds, never
tiles K, has no online softmax: each chunk of 16 query rows meets ALL of K under a [16, sk]
mask (every empty tile's scores are computed), the full softmax is taken and masked.

Slipped past, before the checks were changed (tests/redteam/README.md says how):
  * test_skips_empty_tiles: Q, K, V are turned into plain views with np.asarray first, so
    the recording arrays log no read at all: 0 rows read is "at most k_needed";
    unlike 03/05 (check_reads_seen), 14 never requires every row to have been read;
  * test_full_tiles_unmasked: the probe counts np.where calls on masks of at most Br x Bc;
    the masks here are [16, sk], and they go through np.copyto anyway;
  * test_forward_memory: a 16 x 4096 chunk is 0.5 MiB of scores, under the 12 MiB limit.
block_kinds is written honestly (tile by tile): it is never used by the forward.
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


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
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
