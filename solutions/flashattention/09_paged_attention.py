# drill: flashattention/paged-attention
"""PagedAttention decode: reference solution."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    """Attention of each sequence's new token over its paged cache: returns o [B, Hq, d]."""
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv  # query heads per KV head
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        # Only the pages that hold live keys: entries past them are -1, and
        # k_pages[-1] would silently read the pool's last page.
        pages = block_table[b, : -(-n // page_size)]
        # Logical order of the keys is the order of the table, not of the pool.
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]  # [n, Hkv, d]; slots past n dropped
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            kv = h // group  # consecutive query heads share one KV head
            s = (K[:, kv] @ q[b, h]) * scale  # [n]
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
