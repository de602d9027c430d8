# drill: flashattention/lse-merge
"""Attack: merge_partials merges the output in a fixed tile of 8 head-dimension columns and leaves
the rest of O at zero: right for d <= 8, zero past column 8 for wider heads (d = 64 or 128 in any
real model).

Slipped past, before the checks were changed, every check: no head was wider than d = 8. The
two-halves and merge_many split checks now also merge a shape drawn per run, d from 17 to 159.
"""

from functools import reduce

import numpy as np

D_TILE = 8


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    O = np.zeros(O1.shape)
    cols = slice(0, D_TILE)  # WRONG: only the first 8 columns of the head are merged
    O[:, cols] = (w1[:, None] * O1[:, cols] + w2[:, None] * O2[:, cols]) / ts[:, None]
    L = np.where(seen, shift + np.log(ts), -np.inf)
    return O, L


def merge_many(parts):
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
