# drill: flashattention/flash-backward
# variant: FlashAttention-2 paper's Algorithm 2 line by line: D by einsum first, K/V blocks outside, each dQ_i loaded, updated and written back per step; dead rows get P = 0 via np.exp(where=)
"""Follows FA2's Algorithm 2 numbering; dQ_i copied out, updated and written back on every inner step; P from np.exp(where=) so dead and masked entries stay 0."""
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    tau = 1.0 / math.sqrt(d) if scale is None else scale
    dQ = np.zeros_like(Q, dtype=float)
    dK = np.zeros_like(K, dtype=float)
    dV = np.zeros_like(V, dtype=float)
    D = np.einsum("id,id->i", dO, O)  # line 4: D = rowsum(dO ∘ O)
    Tr, Tc = math.ceil(sq / Br), math.ceil(sk / Bc)
    for j in range(Tc):  # line 6
        ks = slice(j * Bc, min((j + 1) * Bc, sk))
        Kj, Vj = K[ks], V[ks]  # line 7
        dKj = np.zeros((Kj.shape[0], d))  # line 8
        dVj = np.zeros((Vj.shape[0], V.shape[1]))
        for i in range(Tr):  # line 9
            qs = slice(i * Br, min((i + 1) * Br, sq))
            Qi, dOi, Li, Di = Q[qs], dO[qs], L[qs], D[qs]  # line 10
            dQi = dQ[qs].copy()
            Sij = tau * (Qi @ Kj.T)  # line 11
            ok = np.isfinite(Li)[:, None] & np.ones(Sij.shape, dtype=bool)
            if causal:
                ok &= np.arange(ks.start, ks.stop)[None, :] <= np.arange(qs.start, qs.stop)[:, None] + sk - sq
            Pij = np.zeros_like(Sij)
            np.exp(Sij - np.where(np.isfinite(Li), Li, 0.0)[:, None], out=Pij, where=ok)  # line 12
            dVj = dVj + Pij.T @ dOi  # line 13
            dPij = dOi @ Vj.T  # line 14
            dSij = Pij * (dPij - Di[:, None])  # line 15
            dQi = dQi + tau * (dSij @ Kj)  # line 16: load dQ_i, update, write back
            dQ[qs] = dQi
            dKj = dKj + tau * (dSij.T @ Qi)  # line 17
        dK[ks], dV[ks] = dKj, dVj  # line 19
    return dQ, dK, dV
