# drill: flashattention/online-softmax
"""Online softmax: compute softmax in one streaming pass over blocks of logits.

Softmax needs the maximum of the whole row (for stability) and the sum of its
exponentials. Online softmax keeps both as running statistics while the row
arrives block by block:

    m  running maximum of the logits seen so far          (start: -inf)
    l  running sum of exp(x - m) over the logits so far   (start: 0)

Worked example, the row (1, 3 | 2, 5) in two blocks:
    after block (1, 3): m = 3, l = e^(1-3) + e^(3-3)            ≈ 1.1353
    after block (2, 5): m = 5, l = 1.1353·e^(3-5) + e^(2-5) + 1 ≈ 1.2034
which equals sum(exp(x - 5)) computed in one go.

Check your work:  drill check 01_online_softmax.py
"""

import numpy as np


def online_softmax_update(m, l, block):
    """One streaming step.

    m, l   the running max and running sum so far (floats; start with -inf and 0)
    block  1-D np.ndarray of logits, may contain -inf
    returns (m_new, l_new) covering everything seen so far plus `block`

    >>> online_softmax_update(-np.inf, 0.0, np.array([1.0, 3.0]))   # ≈ (3.0, 1.1353)
    """
    # TODO: the new running max, taking the block into account.
    # TODO: move the old sum onto the new max's scale, then add this block's terms.
    raise NotImplementedError


def online_softmax(x, block_size):
    """Softmax along the last axis of x, 1-D [n] or 2-D [rows, n], streaming the statistics.

    Read `block_size` columns at a time to build m and l for every row (the last
    block may be shorter), then return exp(x - m) / l, same shape as x; leave x unchanged.
    Must stay finite for logits of any magnitude (1e4, -1e4, -1e300, -1e308); -inf entries get probability 0.
    Keep l a plain float64 running sum (one addition per block, or per term): the checks read its
    rounding, so a wider (longdouble), compensated (Kahan) or log-domain sum reads as one-shot.

    >>> online_softmax(np.array([1.0, 3.0, 2.0, 5.0]), 2)   # same as softmax in one go
    """
    # TODO: stream the columns in blocks of `block_size`, updating m and l per row.
    # TODO: normalise: exp(x - m) / l.
    raise NotImplementedError
