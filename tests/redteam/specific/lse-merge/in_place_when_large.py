# drill: flashattention/lse-merge
"""Attack: merge_partials and merge_many are right in value, but on inputs of 1024 elements or more
(any real head: 16 rows of d = 64) merge_partials saves an allocation by writing the merged O into
the caller's O1, and merge_many folds into the first part's arrays: the caller's partial results
come back overwritten. The statement says neither function may change the arrays it is given.

Slipped past, before the checks were changed, test_inputs_untouched: it watched inputs of 6 rows
of d = 4 only (24 elements), and every other check hands the functions copies. It now also
watches both functions on a shape drawn like the largest the value checks merge, and merge_many
over 5 to 33 parts.
"""

from functools import reduce

import numpy as np

IN_PLACE_FROM = 1024  # elements of O


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    L = np.where(seen, shift + np.log(ts), -np.inf)
    if O1.size >= IN_PLACE_FROM:  # WRONG: the caller's O1 is overwritten with the merge
        O1 *= (w1 / ts)[:, None]
        O1 += (w2 / ts)[:, None] * O2
        return O1, L
    return (w1[:, None] * O1 + w2[:, None] * O2) / ts[:, None], L


def merge_many(parts):
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
