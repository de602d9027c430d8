# drill: flashattention/paged-attention
# variant: each live page read on its own with an integer index (the last one sliced to its live slots) and the pieces joined with np.concatenate; GQA by viewing the query heads as [Hkv, group]; scores and output by einsum
"""Honest variant: one page at a time into a list, concatenated, all heads at once by einsum."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    dv = v_pages.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    g = Hq // Hkv
    out = np.empty((B, Hq, dv))
    for b in range(B):
        n = int(seq_lens[b])
        ks, vs = [], []
        for p in range(math.ceil(n / ps)):
            page = int(block_table[b, p])
            rows = min(ps, n - p * ps)
            ks.append(k_pages[page, :rows])  # [rows, Hkv, d]
            vs.append(v_pages[page, :rows])
        K = np.concatenate(ks)
        V = np.concatenate(vs)
        qg = q[b].reshape(Hkv, g, d)
        s = np.einsum("hgd,thd->hgt", qg, K) * scale
        s -= s.max(axis=-1, keepdims=True)
        w = np.exp(s)
        w /= w.sum(axis=-1, keepdims=True)
        out[b] = np.einsum("hgt,thd->hgd", w, V).reshape(Hq, dv)
    return out
