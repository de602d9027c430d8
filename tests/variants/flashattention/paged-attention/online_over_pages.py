# drill: flashattention/paged-attention
# variant: pages streamed one at a time with an online softmax per head, the last page cut at seq_len
"""PagedAttention decode, page by page with a running max and sum."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    dv = v_pages.shape[3]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, dv))
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            kv = h // group
            m, l, acc = -np.inf, 0.0, np.zeros(dv)
            for p in range(-(-n // page_size)):
                rows = min(page_size, n - p * page_size)  # the last page may be partly filled
                page = int(block_table[b, p])
                k = k_pages[page, :rows, kv]  # [rows, d]
                v = v_pages[page, :rows, kv]
                s = (k @ q[b, h]) * scale
                m_new = max(m, float(s.max()))
                shrink = math.exp(m - m_new) if m > -np.inf else 0.0
                e = np.exp(s - m_new)
                l = l * shrink + float(e.sum())
                acc = acc * shrink + e @ v
                m = m_new
            o[b, h] = acc / l
    return o
