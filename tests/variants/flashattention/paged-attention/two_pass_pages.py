# drill: flashattention/paged-attention
# variant: textbook two-pass softmax streamed over pages (pass 1: max, pass 2: sum and weighted values), explicit Python loops over sequences, heads and pages, keyword-only use of the pages
"""PagedAttention decode with a two-pass softmax over the pages of each sequence."""

import math

import numpy as np


def _pages_of(block_table, b, n, ps):
    """(physical page, live rows) for each logical page of sequence b."""
    for lp in range(-(-n // ps)):
        yield int(block_table[b][lp]), min(ps, n - lp * ps)


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1:3]
    sc = (1.0 / math.sqrt(d)) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[-1]))
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            kv, qh = h // group, q[b, h]
            m = -math.inf
            for p, rows in _pages_of(block_table, b, n, ps):          # pass 1: the max
                m = max(m, float((k_pages[p, :rows, kv] @ qh).max() * sc))
            l, acc = 0.0, np.zeros(v_pages.shape[-1])
            for p, rows in _pages_of(block_table, b, n, ps):          # pass 2: sum and values
                w = np.exp(k_pages[p, :rows, kv] @ qh * sc - m)
                l += w.sum()
                acc += w @ v_pages[p, :rows, kv]
            o[b, h] = acc / l
    return o
