# drill: flashattention/paged-attention
"""Attack: the default scale is hard-coded as 1/sqrt(8), right only for d = 8. Slipped past,
before the checks were changed, every check because every check used head dim d = 8.
"""
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 0.35355339059327373 if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // page_size)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            kv = h // group
            s = (K[:, kv] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
