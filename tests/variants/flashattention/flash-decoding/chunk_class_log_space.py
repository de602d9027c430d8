# drill: flashattention/flash-decoding
# variant: a small Chunk class per split (bounds from a generator that stops at sk, the missing chunks left empty); L by np.logaddexp.reduce in log space and O = exp(S - L) @ V; V applied transposed (V_cᵀ Pᵀ)ᵀ; a running pairwise merge in place
"""Honest variant: per-chunk objects computed in log space, merged pairwise into one running result."""

import math

import numpy as np


class Chunk:
    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def attend(self, q, K, V, sk, causal, scale):
        S = np.matmul(q, K[self.lo:self.hi].T) * scale
        if causal:
            sq = q.shape[0]
            ok = np.arange(self.lo, self.hi)[None, :] - np.arange(sq)[:, None] <= sk - sq
            S = np.where(ok, S, -np.inf)
        L = np.logaddexp.reduce(S, axis=1)
        O = np.zeros((q.shape[0], V.shape[1]))
        r = np.isfinite(L)
        if r.any():
            P = np.exp(S[r] - L[r, None])
            O[r] = (V[self.lo:self.hi].T @ P.T).T
        return O, L


def _chunks(sk, num_splits):
    size = -(-sk // num_splits)
    lo = 0
    while lo < sk:
        yield Chunk(lo, min(lo + size, sk))
        lo += size


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    if scale is None:
        scale = d ** -0.5
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c, ch in enumerate(_chunks(sk, num_splits)):
        O_parts[c], L_parts[c] = ch.attend(q, K, V, sk, causal, scale)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal=causal, scale=scale)
    o = O_parts[0].copy()
    lse = L_parts[0].copy()
    for O_c, L_c in zip(O_parts[1:], L_parts[1:]):
        new = np.logaddexp(lse, L_c)
        ok = np.isfinite(new)
        a = np.zeros_like(new)
        b = np.zeros_like(new)
        a[ok] = np.exp(lse[ok] - new[ok])
        b[ok] = np.exp(L_c[ok] - new[ok])
        o *= a[:, None]
        o += b[:, None] * O_c
        lse = new
    return o, lse
