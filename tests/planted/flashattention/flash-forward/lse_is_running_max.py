# drill: flashattention/flash-forward
# planted: L is the running max m, not m + log(l)
# expect-fail: A small square input (sq = sk = 8, d = 4, Br = Bc = 4) matches attention
# expect-fail: Matches attention for awkward shapes and block sizes
# expect-fail: The default block sizes (Br = Bc = 16) work when Br and Bc are not passed
# expect-fail: An explicit scale replaces 1/√d
# expect-fail: L is the natural-log logsumexp of each scaled row
# expect-fail: Causal: query i sees keys j <= i + (sk - sq)
# expect-fail: Causal with sq > sk: rows that see no key give O = 0 and L = -inf, no NaN, no warning
"""Planted mistake: L is the running max m, not m + log(l)."""

import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    """Exact attention, one [Br, Bc] score block at a time; returns (O [sq, d], L [sq])."""
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)

    for i in range(0, sq, Br):  # outer loop: one block of queries, read once
        Qi = Q[i:i + Br]  # [br, d]; the last block may be shorter (br <= Br)
        rows = np.arange(i, i + len(Qi))
        m = np.full(len(Qi), -np.inf)  # running max per row     [br]
        l = np.zeros(len(Qi))  # running sum of exp(S - m)       [br]
        acc = np.zeros((len(Qi), V.shape[1]))  # unnormalised O  [br, d]

        for j in range(0, sk, Bc):  # inner loop: stream K and V blocks
            Kj, Vj = K[j:j + Bc], V[j:j + Bc]  # [bc, d]
            S = (Qi @ Kj.T) * scale  # [br, bc], lives only in this iteration
            if causal:
                # Bottom-right alignment: query i sees keys up to i + (sk - sq).
                cols = np.arange(j, j + len(Kj))
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)

            m_new = np.maximum(m, S.max(axis=1))
            # A row that has seen no key yet keeps m = -inf; shift it by 0 instead,
            # so we never compute -inf - (-inf).
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - shift)  # <= 1: moves the old state onto the new max
            P = np.exp(S - shift[:, None])  # [br, bc]; masked entries give exp(-inf) = 0
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ Vj
            m = m_new

        # Normalise once, at the end. Rows that saw no key (l = 0) keep O = 0, L = -inf.
        seen = l > 0
        l_safe = np.where(seen, l, 1.0)
        O[i:i + len(Qi)] = np.where(seen[:, None], acc / l_safe[:, None], 0.0)
        L[i:i + len(Qi)] = np.where(seen, shift, -np.inf)  # natural log
    return O, L
