# drill: flashattention/tiling-shapes
"""Attack: block_sizes divides in np.longdouble (80-bit on x86, a 64-bit mantissa), a float ceiling
that is exact up to 2**64: block_sizes(2**70 + 1, 64) gives Bc = 2**62 instead of 2**62 + 1.

Slipped past, before the checks were changed, test_huge_sizes_exact: the largest SRAM it asked
for was M = 2**63 + 1, which a long double still holds exactly. It now asks M = 2**70 + 1 and
4 * 64 * 10**40 + 1.
"""
import numpy as np


def block_sizes(M, d):
    bc = int(np.ceil(np.longdouble(M) / np.longdouble(4 * d)))  # WRONG: 64-bit mantissa
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return -(-s // Br), -(-s // Bc)


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    tr = -(-s // Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
