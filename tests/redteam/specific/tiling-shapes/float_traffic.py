# drill: flashattention/tiling-shapes
"""Attack: hbm_elements counts in float64 and returns numpy floats, though the statement asks for
ints: inexact once a count passes 2**53 (s = 10**8 + 1, d = 128: the standard count is off by 4).

Slipped past, before the checks were changed, the traffic checks: they compared with ==, which a
float equal to the int passes, and used sizes whose counts stay far below 2**53.
"""
import numpy as np


def _ceil(a, b):
    return -(-a // b)


def block_sizes(M, d):
    bc = _ceil(M, 4 * d)
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    s, d = np.float64(s), np.float64(d)  # WRONG: floats
    tr = np.ceil(s / Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
