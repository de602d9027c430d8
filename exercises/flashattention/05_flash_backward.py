# drill: flashattention/flash-backward
"""The backward pass: gradients of attention without storing the sq×sk matrix P.

The forward pass kept only O [sq, d] and L [sq] (the logsumexp of each row).
Backward rebuilds every block of P from them, a few FLOPs more in exchange for
far less memory traffic:

    S_ij = scale · Q_i K_jᵀ                    [br, bc]  (masked like the forward)
    P_ij = exp(S_ij - L_i)                     [br, bc]  (exactly the softmax, no new max needed)

scale is 1/sqrt(d) when it is None; any other value is used as given, whatever its
sign (0.0 and negative values too), causal or not (the same scale the forward used to
produce L).

With D = rowsum(dO ∘ O)  [sq], computed once, each block then contributes

    dV_j += P_ijᵀ dO_i                         [bc, d]
    dP_ij = dO_i V_jᵀ                          [br, bc]
    dS_ij = P_ij ∘ (dP_ij - D_i)               [br, bc]
    dQ_i += scale · dS_ij K_j                  [br, d]
    dK_j += scale · dS_ijᵀ Q_i                 [bc, d]

FlashAttention-2 puts K/V blocks in the outer loop (dK_j and dV_j stay local to it)
and Q blocks inside; dQ_i is added to from every K/V block.

Edges, as in the forward: any sq and sk (ragged last blocks), the causal mask
aligned bottom-right (query i sees key j <= i + (sk - sq)), and rows that see no
key at all (L = -inf): they contribute nothing and get dQ = 0, with no NaN and no
numpy warning.

Some checks watch which rows of Q, K, V, O and dO your code reads, block by block. Slice the
arrays you are given (K[lo:hi]): a whole-array copy or conversion such as np.asarray(K)
hides the reads, and those checks then fail.

Check your work:  drill check 05_flash_backward.py
"""

import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    """Gradients (dQ [sq, d], dK [sk, d], dV [sk, d]) of attention, given the forward's O and L.

    Never build an array of shape [sq, sk] (the checks measure peak memory).
    """
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    # TODO: D = rowsum(dO * O), one number per query row.
    # TODO: outer loop over K/V blocks, inner loop over Q blocks: recompute S (with the
    #       causal mask) and P = exp(S - L), then accumulate dV, dQ and dK as above.
    #       Mind the rows whose L is -inf.
    raise NotImplementedError
