# drill: flashattention/online-softmax
# variant: base 2 throughout (logits times log2(e), exp2), the max turned back into natural units at the end
"""Online softmax in base 2, as a GPU kernel keeps it: exp2 of log2(e)-scaled logits."""

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)  # exp(x) = 2 ** (x * log2(e))


def online_softmax_update(m, l, block):
    # The state crossing the call is natural: m is the largest logit seen, l = sum of exp(x - m).
    # The sum is the same in either base (2 ** (x*log2e - m*log2e) = exp(x - m)); only m is scaled.
    scaled = np.asarray(block, dtype=np.float64) * LOG2E
    if scaled.size == 0:
        return m, l
    m2 = m * LOG2E
    m2_new = max(m2, float(scaled.max()))
    if m2_new == -math.inf:
        return m, l
    l_new = l * math.exp2(m2 - m2_new) + float(np.exp2(scaled - m2_new).sum())
    return max(m, float(np.max(block))), l_new


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = x.reshape(-1, x.shape[-1]) * LOG2E  # every logit in base-2 units
    m2 = np.full(rows.shape[0], -np.inf)  # running max per row, base 2
    l = np.zeros(rows.shape[0])
    for start in range(0, rows.shape[1], block_size):
        tile = rows[:, start:start + block_size]
        top = np.maximum(m2, tile.max(axis=1))
        safe = np.where(top == -np.inf, 0.0, top)  # a row of only -inf so far keeps l = 0
        l = l * np.exp2(np.where(m2 == -np.inf, -np.inf, m2 - safe)) + np.exp2(tile - safe[:, None]).sum(axis=1)
        m2 = top
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp2(rows - m2[:, None]) / l[:, None]
    return p.reshape(x.shape)
