# drill: flashattention/block-mask
"""Attack: plain dense masked attention (full sq x sk scores and mask), except at the memory
check's size, where only the last 64 query rows are computed (O = 0, L = -inf elsewhere).

Fakes: the whole tiled forward. Slipped past, before the checks were changed,:
  * test_forward_memory: it compares O[n-64:] only (rows = slice(n - 64, n)), a fixed slice
    the subject can aim at; the same hole issue 31 closed for 03/05 with 512 rows drawn after
    the call (SAMPLED_ROWS). 64 rows x 4096 keys is 2 MiB, under the 12 MiB limit;
  * test_skips_empty_tiles / test_full_tiles_unmasked: np.asarray views log no reads and the
    masks are [sq, sk] (never a tile shape), as in dense_row_chunks.py.
"""
import math

import numpy as np


def _dense(Q, K, V, q_doc, kv_doc, rows, window, causal, scale):
    sq_all, sk = len(q_doc), K.shape[0]
    vis = q_doc[rows][:, None] == kv_doc[None, :]
    if causal or window is not None:
        lag = (np.arange(sq_all)[rows][:, None] + (sk - sq_all)) - np.arange(sk)[None, :]
        vis &= lag >= 0
        if window is not None:
            vis &= lag < window
    S = (Q[rows] @ K.T) * scale
    np.copyto(S, -np.inf, where=~vis)
    m = S.max(axis=1)
    seen = m > -np.inf
    shift = np.where(seen, m, 0.0)
    P = np.exp(S - shift[:, None])
    ls = np.where(seen, P.sum(axis=1), 1.0)
    return (P @ V) / ls[:, None], np.where(seen, shift + np.log(ls), -np.inf)


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        r = np.arange(i * Br, min((i + 1) * Br, sq))
        for j in range(Tc):
            c = np.arange(j * Bc, min((j + 1) * Bc, sk))
            t = q_doc[r][:, None] == kv_doc[c][None, :]
            if causal or window is not None:
                lag = (r[:, None] + sk - sq) - c[None, :]
                t &= lag >= 0
                if window is not None:
                    t &= lag < window
            kinds[i, j] = 2 if t.all() else 1 if t.any() else 0
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, d = Q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    rows = slice(sq - 64, sq) if sq >= 4096 else slice(0, sq)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for a in range(rows.start, rows.stop, 16):  # in pieces of 16 rows, to stay well under the limit
        r = slice(a, min(a + 16, rows.stop))
        O[r], L[r] = _dense(Q, K, V, q_doc, kv_doc, r, window, causal, scale)
    return O, L
