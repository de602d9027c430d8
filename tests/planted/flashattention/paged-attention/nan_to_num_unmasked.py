# drill: flashattention/paged-attention
# planted: the whole last page is read and its NaN replaced by nan_to_num, with no mask past seq_len
# expect-fail: Slots past seq_len and unreferenced pages hold finite garbage
"""Planted mistake: the NaN past seq_len is hidden with nan_to_num instead of cutting the keys to seq_len."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // page_size)]
        K = np.nan_to_num(k_pages[pages].reshape(-1, Hkv, d), nan=-1e30)
        V = np.nan_to_num(v_pages[pages].reshape(-1, Hkv, v_pages.shape[3]), nan=0.0)
        for h in range(Hq):
            kv = h // group
            s = (K[:, kv] @ q[b, h]) * scale
            s = np.nan_to_num(s, nan=-np.inf, posinf=-np.inf, neginf=-np.inf)
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
