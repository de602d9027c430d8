# drill: flashattention/lse-merge
"""Attack: merge_many merges in a balanced tree but stops after three rounds, which is enough
for up to 8 parts; with 9 or more it returns the merge of the first 8 only, and the rest of the
keys are lost. Slipped past, before the checks were changed, every merge_many check: the random
splits went up to 8 parts and the other checks used 1 to 5. Now caught by
test_many_random_splits, which also merges 13 and 33 parts."""

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
    level = list(parts)
    for _ in range(3):  # three rounds of pairwise merges: enough for 8 parts
        if len(level) == 1:
            break
        nxt = [merge_partials(*level[i], *level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
