# drill: flashattention/tiling-shapes
"""Attack: hbm_elements counts in np.int64 while the sequence length fits in 32 bits (s < 2**31), on
the reasoning that a 64-bit count then has room to spare, and in Python ints past that. But
standard attention's 4·s² passes 2**63 from s of about 1.52e9: for s = 2**31 - 1 the count wraps
past 2**64 and comes back as a small, wrong count.

Slipped past, before the checks were changed, every check: hbm_elements was asked s below 20000,
10**8 + 1 (4·s² still fits in 63 bits) and 3·10**9 + 1 or more (the Python-int path), never in
between. test_huge_sizes_exact now also asks s = 2**31 - 1 and 2**32 - 1.
"""

import numpy as np


def _ceil_div(a, b):
    return -(-a // b)


def block_sizes(M, d):
    Bc = _ceil_div(M, 4 * d)
    return min(Bc, d), Bc


def num_blocks(s, Br, Bc):
    return _ceil_div(s, Br), _ceil_div(s, Bc)


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    Tr, _ = num_blocks(s, Br, Bc)
    if s < 2**31:  # WRONG: 4 * s * s needs more than 63 bits from s ~ 1.52e9
        s, d, Tr = np.int64(s), np.int64(d), np.int64(Tr)
    with np.errstate(over="ignore"):
        return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * Tr * s * d + s}
