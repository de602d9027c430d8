# drill: flashattention/flash-decoding
# planted: right values, but the merge goes through torch (torch.logsumexp): loading torch alone blows the memory budget
# expect-fail: Over a long cache no chunk holds the whole score row
"""Planted mistake: the merge is right but written in torch; importing torch alone (about 200 MB of
libraries) puts the peak far over a NumPy exercise's budget, so the memory check fails and its likely
mistake names torch, not the scores."""

import math

import numpy as np
import torch


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    """Each chunk's own (O, L): returns O_parts [num_splits, sq, d], L_parts [num_splits, sq]."""
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = -(-sk // num_splits)  # ceil: every chunk but the last is full
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    rows = np.arange(sq)[:, None]
    for c in range(num_splits):
        start, stop = c * chunk, min((c + 1) * chunk, sk)
        if start >= stop:
            continue  # an empty chunk keeps O = 0, L = -inf
        S = (q @ K[start:stop].T) * scale  # [sq, chunk]
        if causal:
            keys = np.arange(start, stop)[None, :]
            S = np.where(keys <= rows + (sk - sq), S, -np.inf)
        # This chunk's own max: a GPU block only ever sees its own keys.
        m = S.max(axis=1)
        seen = m > -np.inf
        m_safe = np.where(seen, m, 0.0)  # no -inf - (-inf) on rows that see nothing here
        P = np.exp(S - m_safe[:, None])  # [sq, chunk], masked entries give 0
        l = P.sum(axis=1)
        l_safe = np.where(seen, l, 1.0)
        O_parts[c] = (P @ V[start:stop]) / l_safe[:, None]
        L_parts[c] = np.where(seen, m_safe + np.log(l_safe), -np.inf)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    """Attention of q over the whole cache from the split-KV partials: returns (o [sq, d], lse [sq])."""
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    # Exercise 04's merge over all chunks at once: weight each chunk by e^(L_c - lse).
    lse = torch.logsumexp(torch.from_numpy(L_parts), dim=0).numpy()  # -inf where every chunk is empty
    w = np.exp(L_parts - np.where(np.isfinite(lse), lse, 0.0))  # empty chunks weigh 0
    o = (w[:, :, None] * O_parts).sum(axis=0)
    return o, lse
