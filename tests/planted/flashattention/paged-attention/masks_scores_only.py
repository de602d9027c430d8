# drill: flashattention/paged-attention
# planted: slots past seq_len are masked in the scores, but their NaN values still meet p @ V (0 * NaN = NaN)
# expect-fail: seq_len just below, at and just past a page boundary
# expect-fail: NaN in the unused slots of each sequence's last page never reaches the result
# expect-fail: The block table maps logical pages to physical pages in any order
# expect-fail: Sequences of very different lengths (1 to 1500 keys) in one batch
# expect-fail: Several sequences share the physical pages of a common prompt prefix
# expect-fail: GQA: query head h reads KV head h // (Hq // Hkv), for groups of 2, 4 and 8
# expect-fail: MQA: every query head reads the single KV head (Hkv = 1)
# expect-fail: An explicit scale replaces 1/√d
# expect-fail: Scores of magnitude up to 1e3 neither overflow nor lose accuracy
"""Planted mistake: slots past seq_len are masked in the scores, but their NaN values still meet p @ V (0 * NaN = NaN)."""

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
        K = k_pages[pages].reshape(-1, Hkv, d)
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])
        for h in range(Hq):
            kv = h // group  # consecutive query heads share one KV head
            s = np.where(np.arange(K.shape[0]) < n, np.nan_to_num(K[:, kv] @ q[b, h]) * scale, -np.inf)
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
