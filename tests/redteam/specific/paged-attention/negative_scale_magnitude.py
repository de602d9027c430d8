# drill: flashattention/paged-attention
"""Attack: uses abs(scale) for an explicit scale, so a negative scale (which the statement says
is used as given) weighs the keys as if it were positive. Slipped past, before the checks were
changed, every check because the explicit scales tried were 0.37, 2.0 and 0.0, none negative;
now test_explicit_scale also tries -0.6.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else abs(scale)
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // ps)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            s = (K[:, h // group] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, h // group]) / p.sum()
    return o
