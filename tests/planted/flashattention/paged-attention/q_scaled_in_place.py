# drill: flashattention/paged-attention
# planted: the queries are scaled in place (q *= scale), changing the caller's q
# expect-fail: q, k_pages, v_pages, block_table and seq_lens are left as they were
"""Planted mistake: q *= scale folds the scale into the caller's queries."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    q *= 1.0 / math.sqrt(d) if scale is None else scale  # written into the caller's array
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // page_size)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            s = K[:, h // group] @ q[b, h]
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, h // group]) / p.sum()
    return o
