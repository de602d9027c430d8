# drill: flashattention/flash-forward
# variant: FA1 order with unnormalised state arrays for all rows, Python while-loops, Q blocks scaled as copies, empty blocks left early, result assembled with np.divide(where=)
"""FA1 loop order with while-loops; a helper updates views of the global m, l, acc in place; masked-out Q blocks skipped; np.divide/np.add with where= at the end."""
import math

import numpy as np


def _tile_update(m, l, acc, S, Vj):
    """One online-softmax step on views m [n], l [n], acc [n, dv], in place."""
    m_new = np.maximum(m, S.max(axis=1))
    alive = m_new > -np.inf
    if not alive.any():
        return
    shift = np.where(alive, m_new, 0.0)
    with np.errstate(invalid="ignore"):
        alpha = np.where(m > -np.inf, np.exp(m - shift), 0.0)
    P = np.exp(S - shift[:, None])
    l *= alpha
    l += P.sum(axis=1)
    acc *= alpha[:, None]
    acc += P @ Vj
    m[:] = m_new


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    m = np.full(sq, -np.inf)
    l = np.zeros(sq)
    acc = np.zeros((sq, V.shape[1]))
    j = 0
    while j < sk:
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        i = 0
        while i < sq:
            e = min(i + Br, sq)
            if causal and j > e - 1 + (sk - sq):
                i = e
                continue  # every row of this Q block is above the diagonal for these keys
            S = (Q[i:e] * scale) @ Kj.T
            if causal:
                bad = np.arange(j, j + len(Kj))[None, :] > np.arange(i, e)[:, None] + (sk - sq)
                S[bad] = -np.inf
            _tile_update(m[i:e], l[i:e], acc[i:e], S, Vj)
            i = e
        j += Bc
    O = np.divide(acc, l[:, None], out=np.zeros_like(acc), where=l[:, None] > 0)
    Lout = np.full(sq, -np.inf)
    np.add(m, np.log(l, out=np.zeros_like(l), where=l > 0), out=Lout, where=l > 0)
    return O, Lout
