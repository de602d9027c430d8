# drill: flashattention/flash-decoding
# variant: each chunk read in sub-blocks of at most 16 keys over two passes (max first, then base-2 sums and weighted values), -inf fill by boolean indexing in place, flash_decode merges in place into its own buffers
"""Honest variant: two-pass base-2 softmax over small sub-blocks of each chunk."""

import math

import numpy as np

SUB = 16
LOG2E = 1.0 / math.log(2.0)


def _scores(q, K, lo, hi, sk, causal, scale):
    s = (q @ K[lo:hi].T) * scale
    if causal:
        sq = q.shape[0]
        hidden = np.arange(lo, hi)[None, :] > (np.arange(sq) + sk - sq)[:, None]
        s[hidden] = -np.inf
    return s


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = -(-sk // num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c in range(num_splits):
        lo, hi = c * chunk, min((c + 1) * chunk, sk)
        if lo >= hi:
            continue
        bounds = [(a, min(a + SUB, hi)) for a in range(lo, hi, SUB)]
        m = np.full(sq, -np.inf)
        for a, b in bounds:  # pass 1: the chunk's max per row
            m = np.maximum(m, _scores(q, K, a, b, sk, causal, scale).max(axis=1))
        seen = m > -np.inf
        m2 = np.where(seen, m, 0.0) * LOG2E
        l = np.zeros(sq)
        acc = np.zeros((sq, V.shape[1]))
        for a, b in bounds:  # pass 2: sums and values, base 2
            p = np.exp2(_scores(q, K, a, b, sk, causal, scale) * LOG2E - m2[:, None])
            l += p.sum(axis=1)
            acc += p @ V[a:b]
        O_parts[c, seen] = acc[seen] / l[seen, None]
        L_parts[c, seen] = (m2[seen] + np.log2(l[seen])) / LOG2E
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    m = L_parts.max(axis=0)
    seen = m > -np.inf
    m[~seen] = 0.0
    w = L_parts - m
    np.exp(w, out=w)
    total = w.sum(axis=0)
    O_parts *= w[:, :, None]
    o = O_parts.sum(axis=0)
    total[~seen] = 1.0
    o /= total[:, None]
    lse = m + np.log(total)
    lse[~seen] = -np.inf
    return o, lse
