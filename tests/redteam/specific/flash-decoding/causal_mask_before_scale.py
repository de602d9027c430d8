# drill: flashattention/flash-decoding
"""Attack: the causal mask is put on the raw scores (a -1e300 stand-in, with a per-row "sees any
key" flag) and only then multiplied by the scale. With scale = 0 every hidden key scores 0 like
the visible ones and gets the same weight; with a negative scale the hidden keys score highest.
Any positive scale gives exact values.

Slipped past, before the checks were changed, test_explicit_scale: it tried scale 0.0 only
without causal, and every causal call had a positive scale. Now test_explicit_scale also runs
causal=True with scale 0.0 and -0.5, and the statement says a given scale is used as it is,
0.0 and negative values included, with hidden keys staying hidden.
"""

import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    """Each chunk's own (O, L): returns O_parts [num_splits, sq, d], L_parts [num_splits, sq]."""
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = -(-sk // num_splits)  # ceil: every chunk but the last is full
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    rows = np.arange(sq)[:, None]
    for c in range(num_splits):
        start, stop = c * chunk, min((c + 1) * chunk, sk)
        if start >= stop:
            continue  # an empty chunk keeps O = 0, L = -inf
        S = q @ K[start:stop].T  # [sq, chunk]
        seen = np.ones(sq, dtype=bool)
        if causal:
            vis = np.arange(start, stop)[None, :] <= rows + (sk - sq)
            S = np.where(vis, S, -1e300)  # masked before scaling
            seen = vis.any(axis=1)
        S = S * scale
        m = np.where(seen, S.max(axis=1), -np.inf)
        m_safe = np.where(seen, m, 0.0)  # no -inf - (-inf) on rows that see nothing here
        P = np.exp(S - m_safe[:, None]) * seen[:, None]
        l = P.sum(axis=1)
        l_safe = np.where(seen, l, 1.0)
        O_parts[c] = (P @ V[start:stop]) / l_safe[:, None]
        L_parts[c] = np.where(seen, m_safe + np.log(l_safe), -np.inf)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    """Attention of q over the whole cache from the split-KV partials: returns (o [sq, d], lse [sq])."""
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    # Exercise 04's merge over all chunks at once: weight each chunk by e^(L_c - lse).
    m = L_parts.max(axis=0)  # [sq]
    shift = np.where(m > -np.inf, m, 0.0)
    w = np.exp(L_parts - shift)  # [num_splits, sq], each <= 1; empty chunks weigh 0
    total = w.sum(axis=0)
    seen = total > 0
    total_safe = np.where(seen, total, 1.0)
    o = (w[:, :, None] * O_parts).sum(axis=0) / total_safe[:, None]
    lse = np.where(seen, shift + np.log(total_safe), -np.inf)
    return o, lse
