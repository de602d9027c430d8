# drill: flashattention/paged-attention
# planted: every sequence scores the whole pool and masks to -inf the slots that are not its live keys (NaN zeroed first)
# expect-fail: Only the pages a sequence references are read
"""Planted mistake: right values, but the whole pool is read for every sequence, then masked."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    P, page_size, Hkv = k_pages.shape[:3]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    K = np.nan_to_num(k_pages[:, :, np.arange(Hq) // group])  # [P, ps, Hq, d]: every page of the pool
    V = np.nan_to_num(v_pages[:, :, np.arange(Hq) // group])
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        t = np.arange(n)
        live = np.zeros((P, page_size), dtype=bool)
        live[block_table[b, t // page_size], t % page_size] = True
        s = np.where(live[..., None], np.einsum("pshd,hd->psh", K, q[b]) * scale, -np.inf)  # [P, ps, Hq]
        p = np.exp(s - s.max(axis=(0, 1)))
        o[b] = np.einsum("psh,pshd->hd", p, V) / p.sum(axis=(0, 1))[:, None]
    return o
