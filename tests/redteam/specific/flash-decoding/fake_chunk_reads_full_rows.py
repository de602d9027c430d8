# drill: flashattention/flash-decoding
"""Attack: no split-KV at all. Both functions first slice K[lo:hi] and V[lo:hi] chunk by chunk
(a dummy loop, so the read log shows perfect chunked reads), then take np.asarray(K) / np.asarray(V)
(plain views that log nothing) and compute each query row's scores over the WHOLE cache.
split_kv_partials cuts every full score row into chunks afterwards; flash_decode is plain
full-row attention with num_splits ignored (no partials, no merge).

Slipped past, before the long-cache check counted one row of scores, test_reads_a_chunk_at_a_time (every row is seen through a chunk-sized slice, the
real work happens on unlogged views) and test_long_cache_memory (one query row at a time holds
one [sk] score row, 1 MiB at sk = 2^17, far under the 16 MiB budget that only excludes the
all-rows [32, sk] array). Values are exact, so every value check passes.
"""
import math

import numpy as np


def _touch(K, V, num_splits):
    sk = K.shape[0]
    size = -(-sk // num_splits)
    for c in range(num_splits):
        a, b = min(c * size, sk), min((c + 1) * size, sk)
        K[a:b]
        V[a:b]


def _rows(q, K, V, causal, scale):
    sq, sk = q.shape[0], K.shape[0]
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    for i in range(sq):
        hi = i + sk - sq + 1 if causal else sk
        yield i, hi, ((K[:hi] @ q[i]) * scale if hi > 0 else None)


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    _touch(K, V, num_splits)
    K, V = np.asarray(K), np.asarray(V)
    sq, sk = q.shape[0], K.shape[0]
    size = -(-sk // num_splits)
    O = np.zeros((num_splits, sq, V.shape[1]))
    L = np.full((num_splits, sq), -np.inf)
    for i, hi, s in _rows(q, K, V, causal, scale):
        if s is None:
            continue
        for c in range(num_splits):
            a, b = min(c * size, hi), min((c + 1) * size, hi)
            if a >= b:
                continue
            sc = s[a:b]
            m = sc.max()
            p = np.exp(sc - m)
            l = p.sum()
            O[c, i] = (p @ V[a:b]) / l
            L[c, i] = m + np.log(l)
    return O, L


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    _touch(K, V, num_splits)
    K, V = np.asarray(K), np.asarray(V)
    sq = q.shape[0]
    o = np.zeros((sq, V.shape[1]))
    lse = np.full(sq, -np.inf)
    for i, hi, s in _rows(q, K, V, causal, scale):
        if s is None:
            continue
        m = s.max()
        p = np.exp(s - m)
        l = p.sum()
        o[i] = (p @ V[:hi]) / l
        lse[i] = m + np.log(l)
    return o, lse
