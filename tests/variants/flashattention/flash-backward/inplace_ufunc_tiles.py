# drill: flashattention/flash-backward
# variant: a helper class per K/V block accumulates dK/dV; dS built in the dP buffer with in-place ufuncs (subtract, multiply, out=); while-loops; all arguments passed by keyword internally
"""A _KVBlock object per K/V block owns dK_j/dV_j; its visit() takes keyword arguments and builds dS in the dP buffer with out= ufuncs."""
import math

import numpy as np


class _KVBlock:
    def __init__(self, K, V, lo, hi):
        self.lo, self.hi = lo, hi
        self.K, self.V = K[lo:hi], V[lo:hi]
        self.dK = np.zeros(self.K.shape)
        self.dV = np.zeros(self.V.shape)

    def visit(self, *, Qi, dOi, Li, Di, rows, scale, causal, offset):
        S = np.matmul(Qi, self.K.T)
        np.multiply(S, scale, out=S)
        if causal:
            cols = np.arange(self.lo, self.hi)
            S[cols[None, :] > rows[:, None] + offset] = -np.inf
        S -= Li[:, None]
        P = np.exp(S, out=S)  # S is done with: reuse it for P
        self.dV += P.T @ dOi
        dS = np.matmul(dOi, self.V.T)
        np.subtract(dS, Di[:, None], out=dS)
        np.multiply(dS, P, out=dS)
        self.dK += scale * (dS.T @ Qi)
        return scale * (dS @ self.K)


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    Lp = L.copy()
    Lp[np.isneginf(Lp)] = np.inf  # exp(S - inf) = 0 for rows that see no key
    D = (O * dO).sum(-1)
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    j = 0
    while j < sk:
        blk = _KVBlock(K, V, j, min(j + Bc, sk))
        i = 0
        while i < sq:
            e = min(i + Br, sq)
            dQ[i:e] += blk.visit(Qi=Q[i:e], dOi=dO[i:e], Li=Lp[i:e], Di=D[i:e], rows=np.arange(i, e),
                                 scale=scale, causal=causal, offset=sk - sq)
            i = e
        dK[blk.lo:blk.hi], dV[blk.lo:blk.hi] = blk.dK, blk.dV
        j += Bc
    return dQ, dK, dV
