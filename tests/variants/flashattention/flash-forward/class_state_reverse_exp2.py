# drill: flashattention/flash-forward
# variant: a small state class per query block, key blocks walked last to first, base-2 (exp2/log2) with Q prescaled per block
import math

import numpy as np

LN2 = math.log(2.0)


class _Rows:
    """Online-softmax state of one block of query rows, in base 2."""

    def __init__(self, n, dv):
        self.m = np.full(n, -np.inf)
        self.l = np.zeros(n)
        self.acc = np.zeros((n, dv))

    def add(self, S2, Vj):
        m_new = np.fmax(self.m, S2.max(axis=1))
        dead = np.isneginf(m_new)
        ref = np.where(dead, 0.0, m_new)
        alpha = np.where(np.isneginf(self.m), 0.0, np.exp2(np.where(dead, 0.0, self.m - ref)))
        P = np.exp2(S2 - ref[:, None])
        self.l = alpha * self.l + P.sum(1)
        self.acc = alpha[:, None] * self.acc + P @ Vj
        self.m = m_new

    def finish(self):
        seen = self.l > 0
        l = np.where(seen, self.l, 1.0)
        O = np.where(seen[:, None], self.acc / l[:, None], 0.0)
        L = np.where(seen, (self.m + np.log2(l)) * LN2, -np.inf)
        return O, L


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    c = (1.0 / math.sqrt(d) if scale is None else scale) / LN2  # scale · log2(e)
    O = np.empty((sq, V.shape[1]))
    L = np.empty(sq)
    starts = list(range(0, sk, Bc))
    for i0 in range(0, sq, Br):
        q = Q[i0:i0 + Br] * c  # a scaled copy of this block only
        st = _Rows(len(q), V.shape[1])
        last = i0 + len(q) - 1 + (sk - sq)  # last key the block's last row sees
        for j0 in reversed(starts):
            if causal and j0 > last:
                continue  # the whole key block is hidden from these rows
            k = K[j0:j0 + Bc]
            S2 = q @ k.T
            if causal:
                S2 = np.where(np.arange(j0, j0 + len(k)) <= np.arange(i0, i0 + len(q))[:, None] + (sk - sq),
                              S2, -np.inf)
            st.add(S2, V[j0:j0 + Bc])
        O[i0:i0 + len(q)], L[i0:i0 + len(q)] = st.finish()
    return O, L
