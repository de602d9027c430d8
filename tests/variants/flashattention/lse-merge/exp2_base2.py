# drill: flashattention/lse-merge
# variant: everything in base 2 (gaps scaled by log2(e), np.exp2 / np.log2), merge_many a plain for-loop fold
"""LSE merge done in base 2, as GPU kernels do with exp2."""

import numpy as np

LOG2E = 1.4426950408889634  # log2(e)


def merge_partials(O1, L1, O2, L2):
    m = np.fmax(L1, L2)
    finite = np.isfinite(m)
    base = np.where(finite, m, 0.0)
    # gaps in base 2: (L_k - m) * log2(e) <= 0, so exp2 never overflows
    w1 = np.exp2((L1 - base) * LOG2E)
    w2 = np.exp2((L2 - base) * LOG2E)
    tot = w1 + w2
    safe = np.where(finite, tot, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / safe[:, None]
    L = np.where(finite, base + np.log2(safe) / LOG2E, -np.inf)
    return O, L


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
