# drill: flashattention/lse-merge
"""Merging partial attention results by their logsumexp (the step ring attention repeats).

Split the keys of an attention into disjoint parts. For each part k you have

    O_k  [n, d]  attention of the n queries over that part's keys only (normalised)
    L_k  [n]     the logsumexp of that part's scaled scores, one per query row

Attention over all the keys follows from these alone. With L = log(e^L1 + e^L2):

    O = e^(L1 - L) · O1 + e^(L2 - L) · O2

It is the online-softmax rescaling again: e^(L_k - L) is the share of the
softmax mass that part k holds. Compute L stably, never as log(exp(L1) + exp(L2)):
L1 and L2 can be 1e4 (or -1e4), and e^1e4 overflows.

A part whose keys are all masked for some row has O = 0 and L = -inf there: it
must contribute nothing. If both parts are -inf, the result is O = 0, L = -inf,
with no NaN and no numpy warning.

Leave the inputs as they are: neither function may change the arrays it is given
(not even the -inf rows of L), nor may merge_many reorder or edit the list of parts.

Example (one row, d = 1):
    >>> merge_partials(np.array([[1.0]]), np.array([0.0]), np.array([[3.0]]), np.array([0.0]))
    # equal masses: O = [[2.0]], L = [log 2] ≈ [0.6931]

Check your work:  drill check 04_lse_merge.py
"""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    """Merge two partial results over disjoint key sets: returns (O [n, d], L [n])."""
    # TODO: the merged logsumexp L = log(e^L1 + e^L2), computed without overflow
    #       (shift by the larger of L1 and L2; mind rows where both are -inf).
    # TODO: O = e^(L1 - L) · O1 + e^(L2 - L) · O2, with O = 0 where L = -inf.
    raise NotImplementedError


def merge_many(parts):
    """Merge a list of (O, L) pairs, in any order, into one (O, L)."""
    # TODO: combine the parts with merge_partials.
    raise NotImplementedError
