# drill: flashattention/paged-attention
# variant: per-token physical (page, slot) indices computed with divmod and gathered directly; GQA by reshaping the query heads to [Hkv, group]; softmax through a logsumexp
"""PagedAttention decode, gathering key rows token by token through the block table."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    dv = v_pages.shape[-1]
    if scale is None:
        scale = d ** -0.5
    group = Hq // Hkv
    out = np.empty((B, Hq, dv))
    for b in range(B):
        n = int(seq_lens[b])
        logical_page, slot = np.divmod(np.arange(n), page_size)
        physical = np.asarray(block_table[b])[logical_page]  # never past the live pages: t < n
        K = k_pages[physical, slot]  # [n, Hkv, d]
        V = v_pages[physical, slot]  # [n, Hkv, dv]
        # Query head h = g * group + j reads KV head g.
        qg = q[b].reshape(Hkv, group, d)
        s = np.einsum("gjd,ngd->gjn", qg, K) * scale  # [Hkv, group, n]
        top = s.max(axis=-1, keepdims=True)
        lse = top + np.log(np.exp(s - top).sum(axis=-1, keepdims=True))
        p = np.exp(s - lse)
        out[b] = np.einsum("gjn,ngv->gjv", p, V).reshape(Hq, dv)
    return out
