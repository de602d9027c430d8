# drill: flashattention/mla-decode
# variant: FlashMLA-style split-KV: the live cache cut into up to 4 contiguous runs of whole blocks, each run streamed with its own unnormalised online state (max, sum, latent accumulator), the runs' partials then merged by logsumexp over the split axis; absorption and up-projection by np.einsum
"""MLA decode as a few independent split-KV streams merged at the end."""

import math

import numpy as np

MAX_SPLITS = 4  # as if one per streaming multiprocessor group


def _stream(q_lat, q_rope, c_kv, k_rope, lo, hi, block, scale):
    """Online softmax over rows lo..hi in blocks: (acc [H, d_c], max [H], sum [H]), unnormalised."""
    H, d_c = q_lat.shape
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, d_c))
    for start in range(lo, hi, block):
        stop = min(start + block, hi)
        c = c_kv[start:stop]
        s = (np.einsum("hc,tc->ht", q_lat, c) + np.einsum("hr,tr->ht", q_rope, k_rope[start:stop])) * scale
        m_new = np.maximum(m, s.max(axis=1))  # finite after the first block
        alpha = np.exp(m - m_new)  # exp(-inf) = 0 on the first block
        p = np.exp(s - m_new[:, None])
        l = l * alpha + p.sum(axis=1)
        acc = acc * alpha[:, None] + p @ c
        m = m_new
    return acc, m, l


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    if scale is None:
        scale = 1.0 / math.sqrt(q_nope.shape[1] + q_rope.shape[1])
    q_lat = np.einsum("hn,hcn->hc", q_nope, W_uk)  # W_uk absorbed into the query
    n_blocks = -(-seq_len // block)
    splits = min(MAX_SPLITS, n_blocks)
    per_split = -(-n_blocks // splits)  # whole blocks per split
    accs, maxes, sums = [], [], []
    for sp in range(splits):
        lo = sp * per_split * block
        hi = min(lo + per_split * block, seq_len)
        if lo >= hi:
            break
        acc, m, l = _stream(q_lat, q_rope, c_kv, k_rope, lo, hi, block, scale)
        accs.append(acc)
        maxes.append(m)
        sums.append(l)
    # Each split's logsumexp, then its share of the softmax mass.
    lse = np.stack(maxes) + np.log(np.stack(sums))  # [splits, H]
    top = lse.max(axis=0)
    w = np.exp(lse - top)
    w /= w.sum(axis=0)
    latent = np.einsum("sh,shc->hc", w / np.stack(sums), np.stack(accs))  # normalise each split, then mix
    return np.einsum("hc,hcv->hv", latent, W_uv)  # W_uv absorbed after the weighted sum
