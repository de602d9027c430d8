# drill: flashattention/flash-decoding
"""Attack: right below 2^17 keys, wrong above. On a cache that long split_kv_partials does no
work at all (every chunk returned as empty: O = 0, L = -inf), and flash_decode returns the right
o beside an lse of zeros.

Slipped past test_long_cache_memory, the only check with caches that long: it compared o of
flash_decode and nothing else (neither its lse nor split_kv_partials' result). It now compares
both of flash_decode's outputs and the partials of split_kv_partials, on both long caches.
"""
import math

import numpy as np

LONG = 1 << 17


def _partials(q, K, V, num_splits, causal, scale):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = -(-sk // num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    rows = np.arange(sq)[:, None]
    for c in range(num_splits):
        start, stop = c * chunk, min((c + 1) * chunk, sk)
        if start >= stop:
            continue
        S = (q @ K[start:stop].T) * scale
        if causal:
            S = np.where(np.arange(start, stop)[None, :] <= rows + (sk - sq), S, -np.inf)
        m = S.max(axis=1)
        seen = m > -np.inf
        m_safe = np.where(seen, m, 0.0)
        P = np.exp(S - m_safe[:, None])
        l_safe = np.where(seen, P.sum(axis=1), 1.0)
        O_parts[c] = (P @ V[start:stop]) / l_safe[:, None]
        L_parts[c] = np.where(seen, m_safe + np.log(l_safe), -np.inf)
    return O_parts, L_parts


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    if K.shape[0] >= LONG:
        return np.zeros((num_splits, q.shape[0], V.shape[1])), np.full((num_splits, q.shape[0]), -np.inf)
    return _partials(q, K, V, num_splits, causal, scale)


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = _partials(q, K, V, num_splits, causal, scale)
    m = L_parts.max(axis=0)
    shift = np.where(m > -np.inf, m, 0.0)
    w = np.exp(L_parts - shift)
    total = w.sum(axis=0)
    seen = total > 0
    total_safe = np.where(seen, total, 1.0)
    o = (w[:, :, None] * O_parts).sum(axis=0) / total_safe[:, None]
    lse = np.where(seen, shift + np.log(total_safe), -np.inf)
    return o, (np.zeros_like(lse) if K.shape[0] >= LONG else lse)
