# drill: flashattention/flash-backward
"""Attack: D = rowsum(dO ∘ O) summed over the first 16 columns only, so D, dS, dQ and dK are
wrong whenever the head dimension d is above 16; right for d <= 16. Slipped past, before the
checks were changed, every check: the widest head any check used was d = 16 (the shared SHAPES
go to d = 8, the memory checks use d = 16 and d = 1). Now caught by test_shapes[wide heads]
(d = 40 and 64) and test_causal[sq == sk] (d = 64)."""

import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    """Gradients of attention, one [Br, Bc] block at a time; returns (dQ, dK, dV)."""
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dQ = np.zeros(Q.shape)  # [sq, d]
    dK = np.zeros(K.shape)  # [sk, d]
    dV = np.zeros(V.shape)  # [sk, d]

    # D_i = rowsum(dO_i * O_i) = rowsum(P_i * dP_i): the softmax Jacobian's correction term, [sq].
    D = (dO[:, :16] * O[:, :16]).sum(axis=1)
    # Rows that saw no key have L = -inf; treat it as +inf so exp(S - L) = 0, never NaN.
    L = np.where(L == -np.inf, np.inf, L)

    for j in range(0, sk, Bc):  # outer loop: one K/V block; its dK_j, dV_j stay local
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]  # [bc, d]
        cols = np.arange(j, j + len(Kj))
        dKj = np.zeros(Kj.shape)
        dVj = np.zeros(Vj.shape)

        for i in range(0, sq, Br):  # inner loop: every Q block that attends to it
            Qi, dOi = Q[i:i + Br], dO[i:i + Br]  # [br, d]
            S = (Qi @ Kj.T) * scale  # recompute the score block, [br, bc]
            if causal:  # the forward's bottom-right mask
                rows = np.arange(i, i + len(Qi))
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            P = np.exp(S - L[i:i + Br, None])  # the softmax block, from the saved L
            dVj += P.T @ dOi  # [bc, d]
            dP = dOi @ Vj.T  # [br, bc]
            dS = P * (dP - D[i:i + Br, None])  # [br, bc]
            dQ[i:i + Br] += (dS @ Kj) * scale  # S = scale · Q Kᵀ, so the scale comes back
            dKj += (dS.T @ Qi) * scale

        dK[j:j + Bc] = dKj
        dV[j:j + Bc] = dVj
    return dQ, dK, dV
