# drill: flashattention/flash-forward
# variant: textbook FlashAttention-1: K/V outer, Q inner, O kept normalised and rewritten in place (Algorithm 1), tensordot
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    l = np.zeros(sq)
    m = np.full(sq, -np.inf)
    for j in range(0, sk, Bc):
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        cols = np.arange(j, j + len(Kj))
        for i in range(0, sq, Br):
            Qi = Q[i:i + Br]
            r = slice(i, i + len(Qi))
            S = np.tensordot(Qi, Kj, axes=([1], [1])) * scale
            if causal:
                S[cols[None, :] > np.arange(i, i + len(Qi))[:, None] + (sk - sq)] = -np.inf
            mt = S.max(axis=1)
            has = np.isfinite(mt)
            if not has.any():
                continue
            Pt = np.zeros_like(S)
            Pt[has] = np.exp(S[has] - mt[has, None])
            lt = Pt.sum(axis=1)
            m_new = np.maximum(m[r], mt)
            live = np.isfinite(m_new)
            a = np.zeros(len(Qi))  # weight of the old state
            b = np.zeros(len(Qi))  # weight of this tile
            old = live & np.isfinite(m[r])
            a[old] = np.exp(m[r][old] - m_new[old])
            b[has] = np.exp(mt[has] - m_new[has])
            l_new = a * l[r] + b * lt
            nz = l_new > 0
            O_r = O[r]  # a view: written in place below
            O_r[nz] = ((a * l[r])[nz, None] * O_r[nz] + b[nz, None] * np.tensordot(Pt[nz], Vj, axes=1)) / l_new[nz, None]
            l[r] = l_new
            m[r] = m_new
    seen = l > 0
    L = np.full(sq, -np.inf)
    L[seen] = m[seen] + np.log(l[seen])
    return O, L
