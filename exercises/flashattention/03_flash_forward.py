# drill: flashattention/flash-forward
"""The tiled forward pass: exact attention without an sq×sk score matrix.

    O = softmax(S) V,   S = scale · Q Kᵀ,   scale = 1/√d unless given

FlashAttention-2 loop order: the OUTER loop walks blocks of Br query rows, the
INNER loop streams blocks of Bc key/value rows. Per query block i, keep

    m    [br]     running max of the scores seen so far          (start: -inf)
    l    [br]     running sum of exp(S - m)                       (start: 0)
    acc  [br, d]  running sum of exp(S - m) · V, not yet divided  (start: 0)

and for each key block j:

    S_ij = scale · Q_i K_jᵀ                  [br, bc]  (never bigger than one block)
    m'   = max(m, rowmax S_ij)
    P    = exp(S_ij - m')                    [br, bc]
    l    = exp(m - m') · l + rowsum P
    acc  = exp(m - m') · acc + P V_j
    m    = m'

After the last key block: O_i = acc / l and L_i = m + log(l), the natural-log
logsumexp of each row, which the backward pass will need.

Edges you must handle:
  - sq and sk need not be multiples of Br and Bc (the last block is shorter),
    and sq may differ from sk.
  - causal=True aligns the mask to the bottom right: query i sees key j only if
    j <= i + (sk - sq). When sq > sk, the first rows see no key at all: return
    O = 0 and L = -inf for them, with no NaN and no numpy warning.
  - Scores as large as 1e4 must not overflow.
  - A given scale is used as it is, whatever its sign (0 and negative values too),
    with causal=True as well as without.

Example:
    >>> Q = np.array([[1.0, 0.0]]); K = np.array([[1.0, 0.0], [0.0, 1.0]]); V = np.eye(2)
    >>> O, L = flash_attention_forward(Q, K, V, Br=1, Bc=1, scale=1.0)
    >>> O   # softmax([1, 0]) = [0.7311, 0.2689];  L = log(e + 1) ≈ 1.3133

Some checks watch which rows of Q, K and V your code reads, block by block. Slice the
arrays you are given (K[lo:hi]): a whole-array copy or conversion such as np.asarray(K)
hides the reads, and those checks then fail.

Check your work:  drill check 03_flash_forward.py
"""

import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    """Attention of Q [sq, d] over K, V [sk, d], tiled; returns (O [sq, d], L [sq]).

    Never build an array of shape [sq, sk] (the checks measure peak memory).
    """
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    # TODO: outer loop over query blocks Q[i:i+Br]; start m, l, acc for the block.
    # TODO: inner loop over key blocks K[j:j+Bc], V[j:j+Bc]: the score block, the causal
    #       mask (bottom-right), then the online-softmax update of m, l and acc.
    # TODO: after the inner loop, write O and L for these rows (O = 0, L = -inf where l = 0).
    raise NotImplementedError
