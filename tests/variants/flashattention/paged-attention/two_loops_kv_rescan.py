# drill: flashattention/paged-attention
# variant: per sequence and KV head, a first loop over pages computes the group's scores from views k_pages[p, :rows, kv]; a second loop re-reads the V pages to accumulate the weighted values; softmax in base 2
"""Honest variant: scores pass over the K pages, then a separate values pass over the V pages."""

import math

import numpy as np


def _live_pages(table_row, n, ps):
    for i, p in enumerate(table_row[: (n + ps - 1) // ps]):
        yield int(p), min(ps, n - i * ps)


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = (1.0 / math.sqrt(d)) if scale is None else float(scale)
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        for kv in range(Hkv):
            heads = slice(kv * group, (kv + 1) * group)
            qs = q[b, heads] * (scale * math.log2(math.e))  # [group, d], scores in base 2
            blocks = [np.dot(qs, k_pages[p, :rows, kv].T) for p, rows in _live_pages(block_table[b], n, ps)]
            s = np.concatenate(blocks, axis=1)  # [group, n]
            w = np.exp2(s - s.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            t = 0
            for p, rows in _live_pages(block_table[b], n, ps):
                o[b, heads] += w[:, t:t + rows] @ v_pages[p, :rows, kv]
                t += rows
    return o
