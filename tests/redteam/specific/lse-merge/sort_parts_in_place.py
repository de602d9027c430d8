# drill: flashattention/lse-merge
"""Attack: merge_partials is right, but merge_many sorts the caller's list in place (parts with
the most -inf rows last) before folding it, so the caller's list comes back reordered. Slipped
past, before the checks were changed, test_inputs_untouched: its parts had no -inf rows, so the
stable sort left the list as it was. Now caught by test_inputs_untouched, whose four parts have
2, 0, 1 and 3 empty rows, and which names a reordered list as such."""

from functools import reduce

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / ts[:, None]
    L = np.where(seen, shift + np.log(ts), -np.inf)
    return O, L


def merge_many(parts):
    parts.sort(key=lambda p: int(np.isneginf(p[1]).sum()))  # the caller's list, reordered
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
