# drill: flashattention/tiling-shapes
"""Attack: all the counting is done in np.int64, which wraps silently: hbm_elements(s=3*10**9 + 1, ...)
overflows 4*s*s (the standard count comes out negative), and num_blocks(2**70 + 1, ...) cannot even
convert its argument. Python ints, as the statement's examples use, never overflow.

Slipped past, before the checks were changed, every check: no size or count came near 2**63, and
numpy integers cross as Python ints, so their type gave nothing away.
"""
import numpy as np


def _ceil(a, b):
    return -(-np.int64(a) // np.int64(b))  # WRONG: 64-bit


def block_sizes(M, d):
    bc = _ceil(M, 4 * d)
    return min(bc, np.int64(d)), bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    s, d = np.int64(s), np.int64(d)  # WRONG: wraps past 2**63
    tr = _ceil(s, Br)
    with np.errstate(over="ignore"):
        return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
