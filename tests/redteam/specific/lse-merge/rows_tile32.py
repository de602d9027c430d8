# drill: flashattention/lse-merge
"""Attack: merge_partials keeps each row's merge weights in a fixed tile of 32 rows (a scratch
buffer sized like an SRAM tile) indexed by row % 32, so from row 32 on every row is merged with
the weights of the row 32 above it. O and L are right for n <= 32 and wrong after.

Slipped past, before the checks were changed, every check: no input had more than 24 rows. The
two-halves and merge_many split checks now also merge a shape drawn per run, 33 to 599 rows.
"""

from functools import reduce

import numpy as np

TILE = 32
_W1, _W2, _SHIFT = np.zeros(TILE), np.zeros(TILE), np.zeros(TILE)


def merge_partials(O1, L1, O2, L2):
    n = L1.shape[0]
    for r in range(min(n, TILE)):
        m = max(L1[r], L2[r])
        _SHIFT[r] = 0.0 if m == -np.inf else m
        _W1[r], _W2[r] = np.exp(L1[r] - _SHIFT[r]), np.exp(L2[r] - _SHIFT[r])
    idx = np.arange(n) % TILE  # WRONG: rows past the tile reuse an earlier row's weights
    w1, w2, shift = _W1[idx], _W2[idx], _SHIFT[idx]
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / ts[:, None]
    L = np.where(seen, shift + np.log(ts), -np.inf)
    return O, L


def merge_many(parts):
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
