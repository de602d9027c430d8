# drill: flashattention/flash-forward
# variant: keeps the running logsumexp and an already-normalised O (no m, l), folded with np.logaddexp; matmul via np.matmul
"""The state per row is (lse, O) with O always normalised: a new block with logsumexp b is
folded in as lse' = logaddexp(lse, b), O' = exp(lse - lse')·O + exp(S - lse')·V_j."""
import math

import numpy as np


def _block_lse(S):
    mx = S.max(axis=1)
    safe = np.where(np.isinf(mx), 0.0, mx)
    total = np.exp(S - safe[:, None]).sum(axis=1)
    out = np.full(len(S), -np.inf)
    seen = total > 0
    out[seen] = safe[seen] + np.log(total[seen])
    return out


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, Br):
        Qi = Q[i:i + Br]
        n = len(Qi)
        lse = np.full(n, -np.inf)
        Oi = np.zeros((n, V.shape[1]))
        for j in range(0, sk, Bc):
            Kj, Vj = K[j:j + Bc], V[j:j + Bc]
            S = np.matmul(Qi, Kj.T) * scale
            if causal:
                keep = np.arange(j, j + len(Kj))[None, :] <= np.arange(i, i + n)[:, None] + (sk - Q.shape[0])
                S = np.where(keep, S, -np.inf)
            b = _block_lse(S)
            new = np.logaddexp(lse, b)
            live = np.isfinite(new)  # rows that have seen a key so far
            if not live.any():
                continue
            Oi[live] = (np.exp(lse[live] - new[live])[:, None] * Oi[live]
                        + np.matmul(np.exp(S[live] - new[live, None]), Vj))
            lse = new
        O[i:i + n] = Oi
        L[i:i + n] = lse
    return O, L
