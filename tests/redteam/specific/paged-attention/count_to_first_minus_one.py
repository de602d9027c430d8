# drill: flashattention/paged-attention
"""Attack: takes a sequence's pages up to the first -1 in its block-table row
(row[:argmax(row < 0)]) instead of ceil(seq_lens[b] / page_size) of them, then cuts the keys
to seq_lens[b]. A row that its pages fill has no -1, argmax finds none and returns 0, so that
sequence gathers no key at all. Slipped past, before the checks were changed, every check
because build_pool always gives the table one -1 column past the longest sequence; now
test_page_boundaries also trims tables to the longest sequence's page count.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        row = block_table[b]
        pages = row[: int(np.argmax(row < 0))]          # the -1 taken as a terminator
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            s = (K[:, h // group] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, h // group]) / p.sum()
    return o
