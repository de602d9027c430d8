# drill: flashattention/mla-decode
"""Attack: naive MLA on every cache of 4096 rows or fewer (every value check's): the live rows are
first copied block by block into a local buffer (c_kv[a:b].copy() into buf[a:b], so the read log
shows one clean pass, `block` rows at a time), then every head's keys and values [H, S, d] are
built from the buffer and softmaxed over an [H, S] score array, all of which the statement forbids.
On longer caches (the memory checks' 32768 and 2^18 rows), the honest absorbed stream. Values are exact.
Slipped past, before the checks were changed: test_memory measured only its two fixed long caches,
and no value check's cache is long enough for the naive arrays to stand out; the reads of every
call look honest. test_memory now also measures a drawn call on a cache of 1024 to 2048 rows whose
per-head keys are 16 MiB or more, where this file holds about 30 MiB beyond its inputs.
"""
import math
import numpy as np


def _stream(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block, scale):
    H = q_nope.shape[0]
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    m = np.full(H, -np.inf); l = np.zeros(H); acc = np.zeros((H, c_kv.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c, r = c_kv[a:b], k_rope[a:b]
        s = (q_lat @ c.T + q_rope @ r.T) * scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    if c_kv.shape[0] > 4096:
        return _stream(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block, scale)
    # small caches: copy the live rows block by block (one clean logged pass), then naive MLA
    c = np.empty((seq_len, c_kv.shape[1])); r = np.empty((seq_len, k_rope.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c[a:b] = c_kv[a:b].copy()
        r[a:b] = k_rope[a:b].copy()
    K = np.einsum("tc,hcn->htn", c, W_uk)
    V = np.einsum("tc,hcv->htv", c, W_uv)
    S = (np.einsum("hn,htn->ht", q_nope, K) + q_rope @ r.T) * scale
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return np.einsum("ht,htv->hv", P / P.sum(axis=1, keepdims=True), V)
