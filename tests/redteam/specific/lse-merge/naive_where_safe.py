# drill: flashattention/lse-merge
"""Attack: L = log(e^L1 + e^L2) computed naively (the form the statement forbids) wherever e^L
neither overflows nor underflows to 0, the stable shifted form only as a fallback. Once e^L is
subnormal (L in about [-745, -708]) it loses digits: L1 = L2 = -740 gives -739.3043 instead of
-739.3069. Slipped past, before the checks were changed, test_extreme_lse, whose fixed rows had
|L| of 1e4 and 5e3 only (the stable fallback), while every other check's L is moderate."""

from functools import reduce

import numpy as np


def _stable(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    return (w1[:, None] * O1 + w2[:, None] * O2) / ts[:, None], np.where(seen, shift + np.log(ts), -np.inf)


def merge_partials(O1, L1, O2, L2):
    O_s, L_s = _stable(O1, L1, O2, L2)
    e1 = np.exp(np.minimum(L1, 700.0))  # no overflow
    e2 = np.exp(np.minimum(L2, 700.0))
    tot = e1 + e2
    ok = (np.maximum(L1, L2) < 700.0) & (tot > 0)
    ts = np.where(ok, tot, 1.0)
    O_n = (e1[:, None] * O1 + e2[:, None] * O2) / ts[:, None]
    return np.where(ok[:, None], O_n, O_s), np.where(ok, np.log(ts), L_s)


def merge_many(parts):
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
