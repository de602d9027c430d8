# drill: flashattention/flash-backward
# planted: the saved L is ignored: the logsumexp is recomputed from Q and K
# expect-fail: The given L and O are used: P = exp(S - L) and D = rowsum(dO ∘ O), nothing recomputed
"""Planted mistake: the saved L is ignored: the logsumexp is recomputed from Q and K."""

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
    L = np.empty(sq)
    for i in range(0, sq, Br):  # a fresh online logsumexp per Q block, ignoring the saved L
        rows = np.arange(i, min(i + Br, sq))
        m, l = np.full(len(rows), -np.inf), np.zeros(len(rows))
        for j in range(0, sk, Bc):
            S = (Q[i:i + Br] @ K[j:j + Bc].T) * scale
            if causal:
                cols = np.arange(j, min(j + Bc, sk))
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            m_new = np.maximum(m, S.max(axis=1))
            safe = np.where(m_new == -np.inf, 0.0, m_new)
            l = l * np.exp(m - safe) + np.exp(S - safe[:, None]).sum(axis=1)
            m = m_new
        L[i:i + Br] = np.where(l > 0, np.where(l > 0, m, 0.0) + np.log(np.where(l > 0, l, 1.0)), np.inf)

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
