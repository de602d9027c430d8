# drill: flashattention/flash-decoding
"""Attack: the causal mask is a finite bias added to the scores (S + where(visible, 0, -1e9)), the
"large negative" of many kernels, with a per-row "sees any key of the chunk" flag so that rows that
see nothing still get O = 0 and L = -inf. A hidden key whose score sits more than about 1e9 above
the visible ones survives the bias and takes the row's weight; everywhere else the values are exact.

Slipped past, before the checks were changed, every causal check: hidden scores were at most about
1000 above the visible ones (test_extreme_logits), far inside the bias. Now
test_causal_own_keys_at_end also gives the last key of the cache a score about 1e12 above the
rest, and the statement says a hidden key stays hidden whatever its score.
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
        S = (q @ K[start:stop].T) * scale  # [sq, chunk]
        if causal:
            keys = np.arange(start, stop)[None, :]
            visible = keys <= rows + (sk - sq)
            S = S + np.where(visible, 0.0, -1e9)  # a finite "large negative" bias, not -inf
            sees = visible.any(axis=1)
        else:
            sees = np.ones(sq, dtype=bool)
        # This chunk's own max: a GPU block only ever sees its own keys.
        m = S.max(axis=1)
        seen = sees
        m_safe = np.where(seen, m, 0.0)  # no -inf - (-inf) on rows that see nothing here
        P = np.exp(S - m_safe[:, None])  # [sq, chunk], masked entries give 0
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
