# drill: flashattention/paged-attention
# variant: the whole batch at once, padded to the longest live sequence; padding positions point at each sequence's own first key (never at garbage) and are masked to -inf; base-2 softmax
"""PagedAttention decode, vectorised over the batch with a padded, masked gather."""

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    lens = np.asarray(seq_lens, dtype=np.int64)
    longest = int(lens.max())

    t = np.arange(longest)
    live = t[None, :] < lens[:, None]                # [B, T]
    t_safe = np.where(live, t[None, :], 0)           # padding re-reads key 0, which is always live
    pages_needed = -(-longest // page_size)
    table = np.asarray(block_table)[:, :pages_needed]
    physical = np.take_along_axis(table, t_safe // page_size, axis=1)  # [B, T], a real page wherever read
    slot = t_safe % page_size
    K = k_pages[physical, slot]                      # [B, T, Hkv, d]
    V = v_pages[physical, slot]                      # [B, T, Hkv, dv]

    kv_of_head = np.arange(Hq) // (Hq // Hkv)
    Kh = K[:, :, kv_of_head]                         # [B, T, Hq, d]
    Vh = V[:, :, kv_of_head]
    s2 = np.einsum("bhd,bthd->bht", q, Kh) * (scale * LOG2E)
    s2 = np.where(live[:, None, :], s2, -np.inf)
    s2 -= s2.max(axis=-1, keepdims=True)             # each row has key 0 live, so the max is finite
    w = np.exp2(s2)
    return np.einsum("bht,bthv->bhv", w, Vh) / w.sum(axis=-1)[..., None]
