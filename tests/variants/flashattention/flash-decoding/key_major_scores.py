# drill: flashattention/flash-decoding
# variant: key-major scores S = K_c qᵀ of shape [chunk, sq] (keys along axis 0, as a decode kernel lays them out), partial buffers from np.empty filled for every chunk, merge weights from a guarded softmax over the chunk axis
import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk, dv = K.shape[0], V.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    size = math.ceil(sk / num_splits)
    O_parts = np.empty((num_splits, sq, dv))
    L_parts = np.empty((num_splits, sq))
    for c in range(num_splits):
        lo, hi = min(c * size, sk), min((c + 1) * size, sk)
        O_parts[c] = 0.0
        L_parts[c] = -np.inf
        if lo == hi:
            continue
        ST = np.matmul(K[lo:hi], q.T) * scale  # [keys, sq]
        if causal:
            hidden = np.arange(lo, hi)[:, None] > np.arange(sq)[None, :] + (sk - sq)
            ST = np.where(hidden, -np.inf, ST)
        m = ST.max(axis=0)  # [sq]
        seen = m != -np.inf
        PT = np.exp(ST[:, seen] - m[seen])  # [keys, seen rows]
        l = PT.sum(axis=0)
        O_parts[c, seen] = np.matmul(PT.T, V[lo:hi]) / l[:, None]
        L_parts[c, seen] = m[seen] + np.log(l)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    top = L_parts.max(axis=0)
    seen = top > -np.inf
    E = np.zeros_like(L_parts)
    E[:, seen] = np.exp(L_parts[:, seen] - top[seen])
    Z = E.sum(axis=0)
    o = np.zeros(O_parts.shape[1:])
    lse = np.full(len(top), -np.inf)
    o[seen] = np.einsum("cq,cqd->qd", E[:, seen] / Z[seen], O_parts[:, seen])
    lse[seen] = top[seen] + np.log(Z[seen])
    return o, lse
