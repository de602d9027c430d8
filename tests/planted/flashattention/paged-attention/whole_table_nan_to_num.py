# drill: flashattention/paged-attention
# planted: every entry of the block-table row is gathered (-1 reads the pool's last page), NaN hidden with nan_to_num, masked by position
# expect-fail: Only the pages a sequence holds are gathered
"""Planted mistake: right values, but every table entry is read: the -1 ones too, their NaN hidden by nan_to_num."""

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
        K = np.nan_to_num(k_pages[block_table[b]].reshape(-1, Hkv, d))
        V = np.nan_to_num(v_pages[block_table[b]].reshape(-1, Hkv, v_pages.shape[3]))
        live = np.arange(K.shape[0]) < n
        for h in range(Hq):
            kv = h // group
            s = np.where(live, (K[:, kv] @ q[b, h]) * scale, -np.inf)
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
