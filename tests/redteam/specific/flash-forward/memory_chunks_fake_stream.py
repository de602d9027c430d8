# drill: flashattention/flash-forward
# Attack on the traffic check (issue 32): memory-efficient attention, not FlashAttention. Chunks
# of 64 query rows meet all of K at once (no online softmax), computed on np.asarray views that
# log no reads, while a dummy loop slices Q[i:i+Br], K[j:j+Bc], V[j:j+Bc] in FA2 order so the
# read log shows perfect streaming. Values are exact and a 64-row chunk fits the 4096-square
# budget; only the verified long-K peak-memory check (16 rows x 2^21 keys) can reject it.
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    for i in range(0, sq, Br):  # what the read log sees: FA2 order, every block met once
        Q[i:i + Br]
        for j in range(0, sk, Bc):
            K[j:j + Bc]
            V[j:j + Bc]
    Qa, Ka, Va = np.asarray(Q), np.asarray(K), np.asarray(V)  # plain views: nothing more is logged
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, Va.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, 64):
        S = (Qa[i:i + 64] @ Ka.T) * scale  # [64, sk]: every key at once
        if causal:
            rows = np.arange(i, i + len(S))
            S = np.where(np.arange(sk)[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
        m = S.max(axis=1)
        shift = np.where(m == -np.inf, 0.0, m)
        P = np.exp(S - shift[:, None])
        l = P.sum(axis=1)
        l_safe = np.where(l > 0, l, 1.0)
        O[i:i + 64] = (P @ Va) / l_safe[:, None]
        L[i:i + 64] = np.where(l > 0, shift + np.log(l_safe), -np.inf)
    return O, L
