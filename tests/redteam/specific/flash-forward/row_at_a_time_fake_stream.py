# drill: flashattention/flash-forward
"""Memory-efficient attention, not FlashAttention: one query row at a time against ALL of K
(a whole row of sk scores, two-pass softmax, no online softmax, Br/Bc ignored), on np.asarray
views that log no reads, behind a dummy FA2-order loop that makes the read log look like
perfect streaming (as memory_chunks_fake_stream.py does).

Slipped past, before recorded inputs held placeholders in their own memory: test_streams_kv_blocks (the read log is faked), test_memory (one row is 32 KiB at
4096), and test_memory_long_keys: the long-K allowance is inputs + one input-sized copy
(K.nbytes = 16 MiB) + 10 MiB slack, and one row of scores against 2^21 keys is exactly
16 MiB = K.nbytes, so a single row of scores kept in place fits under the limit.
"""
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    for i in range(0, sq, Br):  # what the read log sees: FA2 order
        Q[i:i + Br]
        for j in range(0, sk, Bc):
            K[j:j + Bc]
            V[j:j + Bc]
    Qa, Ka, Va = np.asarray(Q), np.asarray(K), np.asarray(V)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, Va.shape[1]))
    L = np.full(sq, -np.inf)
    buf = np.empty(sk)               # one whole row of scores, reused for every row
    for i in range(sq):
        hi = i + (sk - sq) + 1 if causal else sk
        if hi <= 0:
            continue
        hi = min(hi, sk)
        s = buf[:hi]
        np.multiply(Ka[:hi, 0], Qa[i, 0] * scale, out=s)
        for c in range(1, d):
            s += Ka[:hi, c] * (Qa[i, c] * scale)
        m = s.max()
        s -= m
        np.exp(s, out=s)
        l = s.sum()
        for c in range(Va.shape[1]):
            O[i, c] = np.dot(s, Va[:hi, c]) / l
        L[i] = m + math.log(l)
    return O, L
