# drill: flashattention/flash-decoding
# variant: K and V cut with np.split at the chunk bounds (the missing chunks appended empty), the causal mask from np.tril with an offset; each chunk's softmax computed plainly under np.errstate and its no-key rows repaired with np.where afterwards; flash_decode merges with np.logaddexp.reduce and weights exp(L_c - lse)
"""Flash-Decoding with numpy's own splitting and a compute-then-repair softmax."""

import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    chunk = math.ceil(sk / num_splits)
    bounds = list(range(chunk, sk, chunk))
    K_chunks, V_chunks = np.split(K, bounds), np.split(V, bounds)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    # visible[i, j]: query i sees key j of the whole cache (bottom-right causal)
    for c, (Kc, Vc) in enumerate(zip(K_chunks, V_chunks)):
        lo = c * chunk
        S = q @ Kc.T * scale
        if causal:
            # key lo + j is visible to row i when lo + j <= i + sk - sq
            S = np.where(np.tril(np.ones(S.shape, dtype=bool), k=sk - sq - lo), S, -np.inf)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = S.max(axis=1, keepdims=True)  # -inf on a row that sees nothing here
            P = np.exp(S - m)  # NaN on such rows
            l = P.sum(axis=1, keepdims=True)
            O = (P @ Vc) / l
            L = (m + np.log(l))[:, 0]
        empty = np.isneginf(m[:, 0])
        O_parts[c] = np.where(empty[:, None], 0.0, O)
        L_parts[c] = np.where(empty, -np.inf, L)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    lse = np.logaddexp.reduce(L_parts, axis=0)  # -inf where no chunk saw a key
    seen = np.isfinite(lse)
    w = np.exp(L_parts - np.where(seen, lse, 0.0))  # 0 for -inf parts, never NaN
    o = np.einsum("cq,cqd->qd", w, O_parts)
    return o, lse
