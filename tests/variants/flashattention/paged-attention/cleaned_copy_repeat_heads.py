# drill: flashattention/paged-attention
# variant: per sequence the whole live pages gathered in one fancy index, the last page's dead slots overwritten in the gathered copy, GQA by np.repeat of KV heads, one einsum over all heads, scale folded into q
"""PagedAttention decode with a cleaned copy of each sequence's pages."""

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = []
    for b, n in enumerate(np.asarray(seq_lens).tolist()):
        used = block_table[b][: (n + ps - 1) // ps]
        K = k_pages[used]                  # [pages, ps, Hkv, d], a fresh copy
        V = v_pages[used]
        dead = used.size * ps - n          # slots past seq_len in the last page
        if dead:
            K[-1, ps - dead:] = 0.0        # our own copy: safe to overwrite
            V[-1, ps - dead:] = 0.0
        K = np.repeat(K.reshape(-1, Hkv, d), Hq // Hkv, axis=1)          # [T, Hq, d]
        V = np.repeat(V.reshape(-1, Hkv, V.shape[-1]), Hq // Hkv, axis=1)
        s = np.einsum("hd,thd->ht", q[b] * scale, K)
        s[:, n:] = -np.inf
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out.append(np.einsum("ht,thv->hv", p, V))
    return np.stack(out)
