# drill: flashattention/flash-decoding
"""Attack: flash_decode does no split-KV. It takes the whole cache through one elementwise pass
(K * 1.0, V * 1.0), which hands out plain copies of the values, and computes each query row's
attention over all of them at once: num_splits is ignored, no partials, no merge. On the two
very long caches of the memory check (2^17 keys and more), where copies and a row of scores over
the cache would show, it runs the honest split instead. split_kv_partials is honest.

Slipped past test_reads_a_chunk_at_a_time, whose read log leaves elementwise passes out of the
largest read and out of the reads that cross a chunk boundary, and the memory checks (honest at
their sizes). Caught now: a pass over K or V reads every chunk at once, which no split reads.
"""
import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
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


def _merged(q, K, V, num_splits, causal, scale):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    m = L_parts.max(axis=0)
    shift = np.where(m > -np.inf, m, 0.0)
    w = np.exp(L_parts - shift)
    total = w.sum(axis=0)
    seen = total > 0
    total_safe = np.where(seen, total, 1.0)
    o = (w[:, :, None] * O_parts).sum(axis=0) / total_safe[:, None]
    return o, np.where(seen, shift + np.log(total_safe), -np.inf)


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    if sk >= 1 << 17:
        return _merged(q, K, V, num_splits, causal, scale)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    Kc, Vc = K * 1.0, V * 1.0  # one elementwise pass each: the whole cache, as plain arrays
    o = np.zeros((sq, Vc.shape[1]))
    lse = np.full(sq, -np.inf)
    for i in range(sq):
        hi = i + sk - sq + 1 if causal else sk
        if hi <= 0:
            continue
        s = (Kc[:hi] @ q[i]) * scale
        m = s.max()
        p = np.exp(s - m)
        l = p.sum()
        o[i] = (p @ Vc[:hi]) / l
        lse[i] = m + np.log(l)
    return o, lse
