# drill: flashattention/paged-attention
# variant: sequences visited longest first; each one's pages gathered by a list of page numbers then transposed to [Hkv, n, d] and cut; batched matmul over KV heads with the query group as rows; softmax in place with out=; keyword arguments throughout
"""Honest variant: head-major batched matmuls per sequence, in-place softmax, sequences by length."""

import math

import numpy as np


def _attend(qg, K, V, scale):
    s = np.matmul(qg, K.transpose(0, 2, 1))  # [Hkv, group, n]
    s *= scale
    s -= np.max(s, axis=2, keepdims=True)
    np.exp(s, out=s)
    s /= np.sum(s, axis=2, keepdims=True)
    return np.matmul(s, V)  # [Hkv, group, dv]


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    _, ps, Hkv, _ = k_pages.shape
    if scale is None:
        scale = math.sqrt(1.0 / d)
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[-1]))
    for b in sorted(range(B), key=lambda i: -int(seq_lens[i])):
        n = int(seq_lens[b])
        ids = [int(x) for x in block_table[b][: (n - 1) // ps + 1]]
        K = k_pages[ids].transpose(2, 0, 1, 3).reshape(Hkv, -1, d)[:, :n]
        V = v_pages[ids].transpose(2, 0, 1, 3).reshape(Hkv, -1, v_pages.shape[-1])[:, :n]
        out = _attend(qg=q[b].reshape(Hkv, group, d), K=K, V=V, scale=scale)
        o[b] = out.reshape(Hq, -1)
    return o
