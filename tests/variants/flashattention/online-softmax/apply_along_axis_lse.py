# drill: flashattention/online-softmax
# variant: np.apply_along_axis runs a per-row stream (a generator of blocks folded through the update), and each row is normalised by its logsumexp, p = exp(x - m - log l), not by dividing by l
"""Online softmax, one row at a time through np.apply_along_axis, normalised by the logsumexp.

The row's statistics are folded block by block with online_softmax_update; the last step
uses the row's logsumexp lse = m + log(l) (the L that FlashAttention stores), so each
probability is exp((x - m) - log l) with no division.
"""

import math

import numpy as np


def online_softmax_update(m, l, block):
    if len(block) == 0:
        return m, l
    m_new = max(m, float(np.max(block)))
    if m_new == -math.inf:  # nothing finite yet: the sum stays empty
        return m_new, l
    return m_new, l * math.exp(m - m_new) + float(np.sum(np.exp(block - m_new)))


def _blocks(row, size):
    for start in range(0, row.shape[0], size):
        yield row[start:start + size]


def _row_softmax(row, size):
    m, l = -math.inf, 0.0
    for block in _blocks(row, size):
        m, l = online_softmax_update(m, l, block)
    if l == 0.0:  # every logit -inf: undefined, left as NaN without a warning
        return np.full(row.shape, np.nan)
    # (row - m) first: at logits near -1e300, m + log(l) would round log(l) away.
    return np.exp(row - m - math.log(l))


def online_softmax(x, block_size):
    return np.apply_along_axis(_row_softmax, -1, x, block_size)
