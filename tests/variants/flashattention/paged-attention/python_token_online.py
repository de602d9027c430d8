# drill: flashattention/paged-attention
# variant: pure Python loops: for each sequence and query head, token by token (page = t // page_size, slot = t % page_size, read as k_pages[page, slot, kv]) with a scalar online softmax (running max and sum, a list accumulator, math.exp); dot products with math.fsum
"""PagedAttention decode written as plain loops, one token at a time."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    group = Hq // Hkv
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        table = [int(x) for x in block_table[b, :-(-n // page_size)]]  # only the live entries
        for h in range(Hq):
            kv = h // group
            qh = [float(x) for x in q[b, h]]
            m, l = -math.inf, 0.0
            acc = [0.0] * v_pages.shape[3]
            for t in range(n):
                page, slot = table[t // page_size], t % page_size
                key = k_pages[page, slot, kv]
                s = math.fsum(a * float(c) for a, c in zip(qh, key)) * scale
                if s > m:  # rescale what was summed under the old max
                    shrink = math.exp(m - s)  # exp(-inf) = 0.0 on the first token
                    l *= shrink
                    acc = [a * shrink for a in acc]
                    m = s
                w = math.exp(s - m)
                l += w
                value = v_pages[page, slot, kv]
                acc = [a + w * float(c) for a, c in zip(acc, value)]
            o[b, h] = [a / l for a in acc]
    return o
