# drill: flashattention/tiling-shapes
"""Attack: every ceiling is math.ceil(a / b), in floating point, which the statement rules out
("ceiling division, without floating point"). The division rounds a itself once it passes 2**53:
num_blocks(2**60 + 1, 2, 2) gives (2**59, 2**59) instead of (2**59 + 1, 2**59 + 1).

Slipped past, before the checks were changed, test_huge_sizes_exact: its largest size was
2**40 + 1, which a float holds exactly, so every float ceiling came out right.
"""
import math


def _ceil(a, b):
    return math.ceil(a / b)  # WRONG: float division


def block_sizes(M, d):
    bc = _ceil(M, 4 * d)
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    tr = _ceil(s, Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
