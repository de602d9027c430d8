# drill: flashattention/paged-attention
# variant: each sequence's pages gathered once for every head, GQA by repeating KV heads, softmax vectorised over heads
"""PagedAttention decode, all query heads of a sequence at once."""

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    q = np.asarray(q, dtype=np.float64)
    B, Hq, d = q.shape
    _, page_size, Hkv, dv = v_pages.shape
    if scale is None:
        scale = d ** -0.5
    out = np.empty((B, Hq, dv))
    for b in range(B):
        n = int(seq_lens[b])
        used = (n + page_size - 1) // page_size
        table = np.asarray(block_table[b][:used], dtype=np.int64)
        K = np.concatenate([k_pages[p] for p in table], axis=0)[:n]  # [n, Hkv, d]
        V = np.concatenate([v_pages[p] for p in table], axis=0)[:n]
        K = np.repeat(K, Hq // Hkv, axis=1)  # [n, Hq, d]: head h reads KV head h // group
        V = np.repeat(V, Hq // Hkv, axis=1)
        scores = np.einsum("hd,nhd->hn", q[b], K) * scale  # [Hq, n]
        scores -= scores.max(axis=1, keepdims=True)
        w = np.exp(scores)
        w /= w.sum(axis=1, keepdims=True)
        out[b] = np.einsum("hn,nhd->hd", w, V)
    return out
