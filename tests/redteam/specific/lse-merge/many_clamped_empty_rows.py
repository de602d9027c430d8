# drill: flashattention/lse-merge
"""Attack: merge_partials is right, and so is merge_many for 1 or 2 parts, but with 3 or more
parts merge_many stacks them and clamps the total mass at 1e-300 before its log (to dodge
log(0)), with a special case only for an input empty on every row. Rows empty in every part
while other rows are not come back with L = -690.8, not -inf. Slipped past, before the checks
were changed, every check: merge_many met rows empty in all parts only when every row of every
part was empty (test_both_empty's three all-empty parts); its mixed rows went to merge_partials
alone. Now caught by test_both_empty, which also merges its mixed rows with merge_many, as 2
parts and as 4."""

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
    if len(parts) < 3:
        O, L = parts[0]
        for Ok, Lk in parts[1:]:
            O, L = merge_partials(O, L, Ok, Lk)
        return O, L
    Ls = np.stack([L for _, L in parts])
    Os = np.stack([O for O, _ in parts])
    if np.isneginf(Ls).all():
        return np.zeros_like(Os[0]), np.full(Ls.shape[1], -np.inf)
    m = Ls.max(axis=0)
    shift = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(Ls - shift)
    total = np.maximum(w.sum(axis=0), 1e-300)  # "no log(0)"
    O = (w[:, :, None] * Os).sum(axis=0) / total[:, None]
    return O, shift + np.log(total)
