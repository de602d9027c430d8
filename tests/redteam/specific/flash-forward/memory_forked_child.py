# drill: flashattention/flash-forward
# Attack on the memory check: compute the full score matrix in a forked child, so the
# process being measured never holds it; the result comes back through shared memory.
import math
import mmap
import os

import numpy as np


def _full(Q, K, V, causal, scale):
    sq, sk = Q.shape[0], K.shape[0]
    S = (Q @ K.T) * scale
    for i in range(sq):
        if causal:
            S[i, max(0, i + sk - sq + 1):] = -np.inf
    m = S.max(axis=1) if sk else np.full(sq, -np.inf)
    seen = m > -np.inf
    shift = np.where(seen, m, 0.0)
    P = np.exp(S - shift[:, None])
    l_safe = np.where(seen, P.sum(axis=1), 1.0)
    O = np.where(seen[:, None], (P @ V) / l_safe[:, None], 0.0)
    L = np.where(seen, shift + np.log(l_safe), -np.inf)
    return O, L


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dv = V.shape[1]
    shared = mmap.mmap(-1, max(1, (sq * dv + sq) * 8))
    out = np.frombuffer(shared, dtype=np.float64, count=sq * dv + sq)
    pid = os.fork()
    if pid == 0:
        O, L = _full(Q, K, V, causal, scale)
        out[:sq * dv] = O.reshape(-1)
        out[sq * dv:] = L
        os._exit(0)
    os.waitpid(pid, 0)
    return out[:sq * dv].reshape(sq, dv).copy(), out[sq * dv:].copy()
