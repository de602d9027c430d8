# drill: flashattention/flash-decoding
# planted: flash_decode is one-shot full attention over the whole cache: no split, no merge
# expect-fail: Over a long cache no chunk holds the whole score row
"""Planted mistake: split_kv_partials is right, but flash_decode ignores it and attends to every key at once."""

import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = -(-sk // num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    rows = np.arange(sq)[:, None]
    for c in range(num_splits):
        start, stop = c * chunk, min((c + 1) * chunk, sk)
        if start >= stop:
            continue
        S = (q @ K[start:stop].T) * scale
        if causal:
            keys = np.arange(start, stop)[None, :]
            S = np.where(keys <= rows + (sk - sq), S, -np.inf)
        m = S.max(axis=1)
        seen = m > -np.inf
        m_safe = np.where(seen, m, 0.0)
        P = np.exp(S - m_safe[:, None])
        l = P.sum(axis=1)
        l_safe = np.where(seen, l, 1.0)
        O_parts[c] = (P @ V[start:stop]) / l_safe[:, None]
        L_parts[c] = np.where(seen, m_safe + np.log(l_safe), -np.inf)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    S = (q @ K.T) * scale
    if causal:
        S = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq), S, -np.inf)
    m = S.max(axis=1, keepdims=True)
    P = np.exp(S - m)
    l = P.sum(axis=1, keepdims=True)
    return (P @ V) / l, (m + np.log(l))[:, 0]
