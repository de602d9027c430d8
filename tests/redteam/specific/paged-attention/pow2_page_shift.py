# drill: flashattention/paged-attention
"""Attack: the page count is (n + page_size - 1) >> (page_size - 1).bit_length(), a division by
the next power of two: right for power-of-two page sizes, too few pages (keys dropped) for
page_size 12, 24, ... Slipped past, before the checks were changed, every check because
every page size in them (4, 8, 16) was a power of two.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    shift = (page_size - 1).bit_length()
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : (n + page_size - 1) >> shift]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            kv = h // group
            s = (K[:, kv] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
