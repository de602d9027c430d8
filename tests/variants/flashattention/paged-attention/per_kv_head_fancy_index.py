# drill: flashattention/paged-attention
# variant: loop over KV heads outside, gathering k_pages[pages, :, kv] by fancy indexing; the query group attends at once; keys past seq_len masked to -inf before a base-2 softmax and values zeroed with np.where
"""PagedAttention decode, KV head by KV head, pages gathered per head."""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    _, ps, Hkv, _ = k_pages.shape
    if scale is None:
        scale = 1 / math.sqrt(d)
    group = Hq // Hkv
    o = np.empty((B, Hq, v_pages.shape[3]), dtype=np.float64)
    for b in range(B):
        n = int(seq_lens[b])
        npages = -(-n // ps)
        pages = np.asarray(block_table[b, :npages]).astype(np.intp)
        live = np.arange(npages * ps) < n
        for kv in range(Hkv):
            K = k_pages[pages, :, kv].reshape(npages * ps, d)
            V = v_pages[pages, :, kv].reshape(npages * ps, -1)
            K = np.where(live[:, None], K, 0.0)      # garbage (maybe NaN) past seq_len dropped
            V = np.where(live[:, None], V, 0.0)
            hs = slice(kv * group, (kv + 1) * group)
            s = np.matmul(q[b, hs], K.T) * (scale / math.log(2))  # base-2 scores
            s[:, ~live] = -np.inf
            p = np.exp2(s - s.max(axis=1, keepdims=True))
            o[b, hs] = np.matmul(p, V) / p.sum(axis=1, keepdims=True)
    return o
