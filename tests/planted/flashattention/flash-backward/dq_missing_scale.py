# drill: flashattention/flash-backward
# planted: dQ is not multiplied by the scale
# expect-fail: A small square input (sq = sk = 8, d = 4, Br = Bc = 4) gives the right dQ, dK and dV
# expect-fail: dQ, dK and dV are right for awkward shapes and block sizes
# expect-fail: The default block sizes (Br = Bc = 16) work when Br and Bc are not passed
# expect-fail: An explicit scale replaces 1/√d in P, dQ and dK
# expect-fail: Causal: the same bottom-right mask as the forward (query i sees keys j <= i + (sk - sq))
# expect-fail: Causal with sq > sk: rows with L = -inf add nothing and get dQ = 0, no NaN, no warning
# expect-fail: The given L and O are used: P = exp(S - L) and D = rowsum(dO ∘ O), nothing recomputed
# expect-fail: dQ, dK and dV agree with finite differences of sum(O ∘ dO) at sampled entries
# expect-fail: Peak memory at sq = sk = 4096 (Br = Bc = 128) stays far below one score matrix
"""Planted mistake: dQ is not multiplied by the scale."""

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
    D = (dO * O).sum(axis=1)
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
            dQ[i:i + Br] += dS @ Kj  # S = scale · Q Kᵀ, so the scale comes back
            dKj += (dS.T @ Qi) * scale

        dK[j:j + Bc] = dKj
        dV[j:j + Bc] = dVj
    return dQ, dK, dV
