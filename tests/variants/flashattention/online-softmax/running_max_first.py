# drill: flashattention/online-softmax
# variant: the sum rescaled only when the max grows, blocks walked with explicit slices per row
"""Online softmax, one row at a time, rescaling the running sum only when its max moves."""

import math

import numpy as np


def online_softmax_update(m, l, block):
    values = [float(v) for v in np.ravel(block)]
    best = m
    for v in values:
        if v > best:
            best = v
    if best == -math.inf:
        return best, l
    if best > m:
        l = l * math.exp(m - best)  # move the old sum onto the new max
    return best, l + float(np.exp(np.asarray(values) - best).sum())  # the block's terms summed at once


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    rows = x.reshape(-1, x.shape[-1])
    result = out.reshape(-1, x.shape[-1])
    for r, row in enumerate(rows):
        m, l = -math.inf, 0.0
        for begin in range(0, row.shape[0], block_size):
            m, l = online_softmax_update(m, l, row[begin:begin + block_size])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            result[r] = np.exp(row - m) / l
    return out
