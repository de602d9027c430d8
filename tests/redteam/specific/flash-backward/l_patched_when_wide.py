# drill: flashattention/flash-backward
"""Attack: turns the rows of L that see no key into +inf in the caller's L itself
(L[L == -inf] = inf) whenever d > 4, and is otherwise the honest backward, so every gradient
it returns is right.
Slipped past test_inputs_untouched: that check passed d = 4 only, and no other call looks at
the arguments after the call. The inputs check now also passes wider heads drawn per run (sq > sk,
causal, so L has -inf rows).
"""

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
    if d > 4:  # the inputs check only ever passes d = 4
        L[L == -np.inf] = np.inf  # writes into the caller's L
    else:
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
