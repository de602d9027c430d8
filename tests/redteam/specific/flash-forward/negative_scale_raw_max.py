# drill: flashattention/flash-forward
"""Attack: the running max is kept over the raw products Q Kᵀ and multiplied by the scale only
when used. For scale >= 0 that is the max of the scores; for a negative scale it is their
minimum, so exp(S - m) has positive exponents: exact on small scores, an overflow once |S| is
in the thousands. Slipped past, before the checks were changed: the large-score cases
(test_large_logits, test_shift_invariance, test_rows_keep_their_own_statistics) used the
default scale only, and the negative scales tried (-0.6, -0.8) met scores of a few units.
test_large_logits now also runs |S| up to 1e4 with a negative scale, causal and not.
"""
import math
import numpy as np

def _honest(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
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
                # Bottom-right alignment: query row r sees key c only if c <= r + (sk - sq).
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

        # Normalise once, at the end. Rows that saw no key have l = 0 and acc = 0:
        # dividing by 1 instead keeps O = 0, and m + log(1) = -inf is their L.
        l_safe = np.where(l > 0, l, 1.0)
        O[i:i + len(Qi)] = acc / l_safe[:, None]
        L[i:i + len(Qi)] = m + np.log(l_safe)  # natural-log logsumexp of each row
    return O, L



def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, Br):
        Qi = Q[i:i + Br]
        rows = np.arange(i, i + len(Qi))
        m = np.full(len(Qi), -np.inf)  # running max of the RAW scores
        l = np.zeros(len(Qi))
        acc = np.zeros((len(Qi), V.shape[1]))
        for j in range(0, sk, Bc):
            Kj, Vj = K[j:j + Bc], V[j:j + Bc]
            R = Qi @ Kj.T
            if causal:
                cols = np.arange(j, j + len(Kj))
                R = np.where(cols[None, :] <= rows[:, None] + (sk - sq), R, -np.inf)
            m_new = np.maximum(m, R.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp((np.where(m == -np.inf, shift, m) - shift) * scale)
            alpha = np.where(m == -np.inf, 0.0, alpha)
            P = np.exp(np.where(np.isinf(R), -np.inf, (R - shift[:, None]) * scale))
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ Vj
            m = m_new
        l_safe = np.where(l > 0, l, 1.0)
        O[i:i + len(Qi)] = acc / l_safe[:, None]
        L[i:i + len(Qi)] = np.where(l > 0, m * scale + np.log(l_safe), -np.inf)
    return O, L
