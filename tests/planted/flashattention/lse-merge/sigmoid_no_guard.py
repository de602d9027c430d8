# drill: flashattention/lse-merge
# planted: the sigmoid form O1 - sigmoid(L2 - L1)(O1 - O2) without a guard for -inf parts
# expect-fail: A part with L = -inf contributes nothing
# expect-fail: Both parts -inf give O = 0 and L = -inf, with no NaN and no warning
# expect-fail: merge_many gives the same result in any order of the parts
"""Planted mistake: the sigmoid form O1 - sigmoid(L2 - L1)(O1 - O2) without a guard for -inf parts."""

import numpy as np


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _logsigmoid(x):
    return -np.logaddexp(0.0, -x)


def merge_partials(O1, L1, O2, L2):
    O = O1 - _sigmoid(L2 - L1)[:, None] * (O1 - O2)
    L = L1 - _logsigmoid(L1 - L2)
    return O, L


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
