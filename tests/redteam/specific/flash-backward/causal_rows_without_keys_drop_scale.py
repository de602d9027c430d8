# drill: flashattention/flash-backward
"""Attack: with causal=True and sq > sk (the case with rows that see no key), a given scale is
replaced by 1/sqrt(d); every other pairing of options takes the scale as given. Slipped past,
before the checks were changed, every check: causal calls with a given scale had sq <= sk only
(test_explicit_scale at 24x30, the memory checks at 4096 square and 16 x 2^20), and the sq > sk
causal checks (test_causal_rows_without_keys, test_inputs_untouched, test_finite_differences)
ran with the default scale or only watched the inputs. Now caught by test_explicit_scale
(causal, sq = 34 > sk = 21, scale=1.7)."""

import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    """Gradients of attention, one [Br, Bc] block at a time; returns (dQ, dK, dV)."""
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if (scale is None or (causal and sq > sk)) else scale
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
            dQ[i:i + Br] += (dS @ Kj) * scale  # S = scale · Q Kᵀ, so the scale comes back
            dKj += (dS.T @ Qi) * scale

        dK[j:j + Bc] = dKj
        dV[j:j + Bc] = dVj
    return dQ, dK, dV
