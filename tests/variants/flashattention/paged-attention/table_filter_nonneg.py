# drill: flashattention/paged-attention
# variant: a sequence's pages found by dropping the -1 entries of its table row (block_table[b][row >= 0]) rather than counting ceil(seq_len / page_size); per query head a Python loop, logsumexp-style weights exp(s - lse)
"""Honest variant: live pages by filtering out the -1 entries; weights from the logsumexp."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, n_kv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    per_kv = Hq // n_kv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b, n in enumerate(seq_lens):
        row = block_table[b]
        pages = row[row >= 0]  # -1 past the last page: the rest are this sequence's pages
        keys = k_pages[pages].reshape(len(pages) * page_size, n_kv, d)[:n]
        vals = v_pages[pages].reshape(len(pages) * page_size, n_kv, -1)[:n]
        for h in range(Hq):
            s = keys[:, h // per_kv, :] @ q[b, h] * scale
            top = s.max()
            lse = top + math.log(np.exp(s - top).sum())
            o[b, h] = np.exp(s - lse) @ vals[:, h // per_kv, :]
    return o
