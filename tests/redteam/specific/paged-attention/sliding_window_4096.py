# drill: flashattention/paged-attention
"""Attack: attends only over the last 4096 keys of each sequence (a Mistral-sized sliding
window), not all seq_lens[b] keys. Slipped past, before the checks were changed, every check:
sliding_window_512.py had pushed the longest sequence to 1500 keys (test_very_different_lengths),
still shorter than this window. Now test_shared_prefix also gives one of the sequences that
share the prefix 4500 keys.
"""
import math
import numpy as np

WINDOW = 4096


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // ps)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n][-WINDOW:]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n][-WINDOW:]
        for h in range(Hq):
            s = (K[:, h // group] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, h // group]) / p.sum()
    return o
