# drill: flashattention/tiling-shapes
"""Attack: every ceiling is math.ceil(Decimal(a) / Decimal(b)). A Decimal is floating point too (the
statement asks for ceilings "without floating point"): its default context keeps 28 significant
digits, so num_blocks(10**40 + 1, 10**20, 10**39) loses the remainder and gives
(10**20, 10) instead of (10**20 + 1, 11).

Slipped past, before the checks were changed, test_huge_sizes_exact: its largest size, 2**70 + 1,
has 22 digits, which a Decimal holds exactly. It now also asks num_blocks and block_sizes at 10**40
and beyond.
"""
from decimal import Decimal
import math


def _ceil(a, b):
    return int(math.ceil(Decimal(a) / Decimal(b)))  # WRONG: decimal floating point, 28 digits


def block_sizes(M, d):
    bc = _ceil(M, 4 * d)
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    tr = -(-s // Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
