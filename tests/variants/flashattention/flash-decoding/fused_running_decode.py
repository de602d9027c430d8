# drill: flashattention/flash-decoding
# variant: one helper computes a chunk's (O, L); flash_decode calls it chunk by chunk and folds each into a running (m, l, acc) at once instead of storing all partials; math.ceil for the chunk size
import math

import numpy as np


def _bounds(sk, num_splits):
    size = math.ceil(sk / num_splits)
    return [(c * size, min((c + 1) * size, sk)) for c in range(num_splits)]


def _chunk(q, K, V, a, b, causal, scale):
    """Attention of q over keys a..b-1 alone: (O [sq, dv], L [sq]), O = 0 and L = -inf where nothing is seen."""
    sq, sk = q.shape[0], K.shape[0]
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    if a >= b:
        return O, L
    S = (q @ K[a:b].T) * scale
    if causal:
        S = np.where(np.arange(a, b) <= np.arange(sq)[:, None] + (sk - sq), S, -np.inf)
    m = S.max(axis=1)
    ok = m > -np.inf
    P = np.exp(S[ok] - m[ok, None])
    l = P.sum(axis=1)
    O[ok] = (P @ V[a:b]) / l[:, None]
    L[ok] = m[ok] + np.log(l)
    return O, L


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    parts = [_chunk(q, K, V, a, b, causal, scale) for a, b in _bounds(K.shape[0], num_splits)]
    return np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    sq = q.shape[0]
    m = np.full(sq, -np.inf)
    l = np.zeros(sq)  # sum of exp(L_c - m)
    acc = np.zeros((sq, V.shape[1]))  # sum of exp(L_c - m) · O_c
    for a, b in _bounds(K.shape[0], num_splits):
        Oc, Lc = _chunk(q, K, V, a, b, causal, scale)
        m_new = np.maximum(m, Lc)
        ok = m_new > -np.inf
        alpha = np.zeros(sq)
        beta = np.zeros(sq)
        alpha[ok] = np.exp(m[ok] - m_new[ok])
        beta[ok] = np.exp(Lc[ok] - m_new[ok])
        l = alpha * l + beta
        acc = alpha[:, None] * acc + beta[:, None] * Oc
        m = m_new
    seen = l > 0
    o = np.zeros_like(acc)
    o[seen] = acc[seen] / l[seen, None]
    lse = np.full(sq, -np.inf)
    lse[seen] = m[seen] + np.log(l[seen])
    return o, lse
