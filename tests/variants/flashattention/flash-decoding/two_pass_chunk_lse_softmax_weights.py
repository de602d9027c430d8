# drill: flashattention/flash-decoding
# variant: each chunk's L found first (max, then log of the shifted sum) and its O as exp(S - L) @ V with no division; the merge weights are a guarded softmax over the chunk axis of L_parts
"""Split-KV decoding: chunk logsumexp first, then probabilities relative to it; softmax-over-chunks merge."""

import math

import numpy as np


def _chunk(q, Kc, Vc, scale, visible):
    """(O, L) of one chunk of keys; rows that see none of them get 0 and -inf."""
    S = (q @ Kc.T) * scale
    if visible is not None:
        S = np.where(visible, S, -np.inf)
    any_key = visible.any(axis=1) if visible is not None else np.ones(S.shape[0], dtype=bool)
    O = np.zeros((S.shape[0], Vc.shape[1]))
    L = np.full(S.shape[0], -np.inf)
    if any_key.any():
        Sr = S[any_key]
        top = Sr.max(axis=1, keepdims=True)
        Lr = top + np.log(np.exp(Sr - top).sum(axis=1, keepdims=True))  # the chunk's own logsumexp
        O[any_key] = np.exp(Sr - Lr) @ Vc                                 # rows of exp(S - L) already sum to 1
        L[any_key] = Lr[:, 0]
    return O, L


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    scale = d ** -0.5 if scale is None else scale
    size = -(-sk // num_splits)
    outs, lses = [], []
    for c in range(num_splits):
        a, b = min(c * size, sk), min((c + 1) * size, sk)
        if a == b:
            outs.append(np.zeros((sq, V.shape[1])))
            lses.append(np.full(sq, -np.inf))
            continue
        vis = None
        if causal:
            vis = np.arange(a, b)[None, :] - np.arange(sq)[:, None] <= sk - sq
        O, L = _chunk(q, K[a:b], V[a:b], scale, vis)
        outs.append(O)
        lses.append(L)
    return np.stack(outs), np.stack(lses)


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    best = L_parts.max(axis=0)
    alive = best > -np.inf
    best0 = np.where(alive, best, 0.0)
    e = np.exp(L_parts - best0)                 # [num_splits, sq]: 0 for empty chunks
    z = e.sum(axis=0)
    z1 = np.where(alive, z, 1.0)
    share = e / z1                              # softmax of the chunk lses, per row
    o = np.einsum("cs,csd->sd", share, O_parts)
    lse = np.where(alive, best0 + np.log(z1), -np.inf)
    return o, lse
