# drill: flashattention/paged-attention
# variant: the live pages of the whole batch gathered in one fancy index (shared pages repeated), live tokens picked by index, then a segmented softmax with np.maximum.reduceat / np.add.reduceat; KV heads mapped to query heads by an index array
"""Honest variant: one batched gather of every sequence's live pages, segment-wise softmax."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    lens = np.asarray(seq_lens, dtype=np.int64)
    npages = -(-lens // ps)
    pages = np.concatenate([block_table[b, : npages[b]] for b in range(B)]).astype(np.int64)
    # token t of sequence b sits at row (page offset of b) * ps + t of the gathered pages
    page_start = np.concatenate([[0], np.cumsum(npages)[:-1]])
    tok = np.concatenate([page_start[b] * ps + np.arange(lens[b]) for b in range(B)])
    seq = np.repeat(np.arange(B), lens)
    K = k_pages[pages].reshape(-1, Hkv, d)[tok]  # [T, Hkv, d], live keys only
    V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[tok]
    kv_of = np.arange(Hq) // (Hq // Hkv)
    s = np.einsum("thd,thd->th", q[seq], K[:, kv_of]) * scale  # [T, Hq]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    m = np.maximum.reduceat(s, starts, axis=0)  # [B, Hq]
    p = np.exp(s - m[seq])
    l = np.add.reduceat(p, starts, axis=0)
    acc = np.add.reduceat(p[:, :, None] * V[:, kv_of], starts, axis=0)  # [B, Hq, dv]
    return acc / l[:, :, None]
