# drill: flashattention/flash-decoding
# variant: scale folded into a copy of q, einsum scores, np.exp written in place into the chunk's score buffer, loop stops at the first empty chunk; merge lse = np.logaddexp.reduce over the chunk axis
import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    qs = q * (1.0 / math.sqrt(d) if scale is None else scale)  # a scaled copy; q itself untouched
    size = (sk + num_splits - 1) // num_splits
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c in range(num_splits):
        a, b = c * size, min(sk, (c + 1) * size)
        if a >= b:
            break  # this chunk and every later one are empty
        S = np.einsum("qd,kd->qk", qs, K[a:b])
        if causal:
            S[np.arange(a, b)[None, :] > np.arange(sq)[:, None] + (sk - sq)] = -np.inf
        m = S.max(axis=1)
        live = np.isfinite(m)
        S -= np.where(live, m, 0.0)[:, None]
        np.exp(S, out=S)  # S now holds P
        l = S.sum(axis=1)
        O_parts[c][live] = np.einsum("qk,kd->qd", S[live], V[a:b]) / l[live, None]
        L_parts[c][live] = m[live] + np.log(l[live])
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal=causal, scale=scale)
    lse = np.logaddexp.reduce(L_parts, axis=0)  # -inf where every chunk is empty for the row
    live = np.isfinite(lse)
    w = np.zeros_like(L_parts)
    w[:, live] = np.exp(L_parts[:, live] - lse[live])
    o = np.einsum("cq,cqd->qd", w, O_parts)
    return o, lse
