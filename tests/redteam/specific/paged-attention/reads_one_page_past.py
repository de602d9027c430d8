# drill: flashattention/paged-attention
"""Attack: gathers n // page_size + 1 pages, so when seq_len is a multiple of page_size it
also gathers the entry past the sequence's last page (a -1: the pool's last page), then cuts
it away with [:n]. Slipped past, before the checks were changed, every check: the page read
too many is cut before it is used, so its NaN or garbage never reaches the result, and one
page more costs no memory the wide-table check could see.
"""
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
        pages = block_table[b, : n // page_size + 1]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            kv = h // group
            s = (K[:, kv] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
