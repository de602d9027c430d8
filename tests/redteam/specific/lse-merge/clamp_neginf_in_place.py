# drill: flashattention/lse-merge
"""Attack: merge_partials is right, but to dodge -inf - (-inf) it overwrites the -inf entries of
the caller's L1 and L2 in place with -1e300, so the arrays it was handed come back changed on
every empty row. Slipped past, before the checks were changed, test_inputs_untouched, whose
parts had no -inf row (so the patch changed nothing there), while every other check hands the
function copies. Now caught by test_inputs_untouched, whose parts carry empty rows (one part
empty, and both empty) in merge_partials and in merge_many."""

from functools import reduce

import numpy as np

FLOOR = -1e300


def merge_partials(O1, L1, O2, L2):
    both = np.isneginf(L1) & np.isneginf(L2)
    L1[np.isneginf(L1)] = FLOOR  # in place: the caller's L1 loses its -inf
    L2[np.isneginf(L2)] = FLOOR
    m = np.maximum(L1, L2)
    w1, w2 = np.exp(L1 - m), np.exp(L2 - m)
    total = w1 + w2
    O = (w1[:, None] * O1 + w2[:, None] * O2) / total[:, None]
    O[both] = 0.0
    L = np.where(both, -np.inf, m + np.log(total))
    return O, L


def merge_many(parts):
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
