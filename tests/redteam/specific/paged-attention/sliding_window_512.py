# drill: flashattention/paged-attention
"""Attack: attends only over the last 512 keys of each sequence (a sliding window), not all
seq_lens[b] keys. Slipped past, before the checks were changed, every check because the
longest sequence in them had 300 keys (test_very_different_lengths).
"""
import math
import numpy as np

WINDOW = 512


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // page_size)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n][-WINDOW:]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n][-WINDOW:]
        for h in range(Hq):
            kv = h // group
            s = (K[:, kv] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
