# drill: flashattention/flash-decoding
# variant: inside each chunk the keys stream in small blocks with an online softmax (a FlashAttention forward per split)
"""Split-KV decoding where every split runs its own streaming forward."""

import math

import numpy as np

BLOCK = 8  # keys per step inside a chunk


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = math.ceil(sk / num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    row = np.arange(sq)[:, None] + (sk - sq)
    for c in range(num_splits):
        lo, hi = c * chunk, min(sk, (c + 1) * chunk)
        m = np.full(sq, -np.inf)
        l = np.zeros(sq)
        acc = np.zeros((sq, V.shape[1]))
        for j in range(lo, hi, BLOCK):
            stop = min(j + BLOCK, hi)
            S = (q @ K[j:stop].T) * scale
            if causal:
                S = np.where(np.arange(j, stop)[None, :] <= row, S, -np.inf)
            m_new = np.maximum(m, S.max(axis=1))
            live = m_new > -np.inf
            ref = np.where(live, m_new, 0.0)
            alpha = np.where(live, np.exp(np.where(live, m, 0.0) - ref), 0.0)
            alpha = np.where(m > -np.inf, alpha, 0.0)
            P = np.exp(S - ref[:, None])
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ V[j:stop]
            m = m_new
        seen = l > 0
        O_parts[c] = acc / np.where(seen, l, 1.0)[:, None]
        L_parts[c] = np.where(seen, np.where(seen, m, 0.0) + np.log(np.where(seen, l, 1.0)), -np.inf)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    lse_max = L_parts.max(axis=0)
    ref = np.where(lse_max > -np.inf, lse_max, 0.0)
    w = np.exp(L_parts - ref)
    total = w.sum(axis=0)
    seen = total > 0
    o = np.einsum("cs,csd->sd", w, O_parts) / np.where(seen, total, 1.0)[:, None]
    return o, np.where(seen, ref + np.log(np.where(seen, total, 1.0)), -np.inf)
