# drill: flashattention/flash-decoding
"""Attack: split_kv_partials computes each query row's scores over the WHOLE cache first and
only then cuts that row into chunks (the very mistake test_long_cache_memory's hint names:
"split_kv_partials built the scores over the whole cache, then cut them"); flash_decode is
full-row attention with num_splits ignored (as in decode_without_splits.py).

Slipped past, before the checks were changed, test_long_cache_memory: the budget (16 MiB) only sees the all-rows [32, 2^17]
array (32 MiB); building the whole-cache score row one query row at a time holds 1 MiB.
The values of every chunk are exact, so no value check can tell.
"""
import math

import numpy as np


def _attend_rows(q, K, V, causal, scale):
    sq, sk = q.shape[0], K.shape[0]
    o = np.zeros((sq, V.shape[1]))
    lse = np.full(sq, -np.inf)
    for i in range(sq):
        hi = i + sk - sq + 1 if causal else sk   # keys this row may see
        if hi <= 0:
            continue
        s = (K[:hi] @ q[i]) * scale               # one row of scores over the whole cache
        m = s.max()
        p = np.exp(s - m)
        l = p.sum()
        o[i] = (p @ V[:hi]) / l
        lse[i] = m + np.log(l)
    return o, lse


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    size = -(-sk // num_splits)
    O = np.zeros((num_splits, sq, V.shape[1]))
    L = np.full((num_splits, sq), -np.inf)
    for i in range(sq):
        s = (K @ q[i]) * scale                    # the whole cache's scores for this row, then cut
        if causal:
            s[i + sk - sq + 1:] = -np.inf
        for c in range(num_splits):
            a, b = min(c * size, sk), min((c + 1) * size, sk)
            sc = s[a:b]
            if a >= b or sc.max() == -np.inf:
                continue
            m = sc.max()
            p = np.exp(sc - m)
            l = p.sum()
            O[c, i] = (p @ V[a:b]) / l
            L[c, i] = m + np.log(l)
    return O, L


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    return _attend_rows(q, K, V, causal, scale)     # num_splits ignored: no split, no merge
