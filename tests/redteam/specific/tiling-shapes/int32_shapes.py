# drill: flashattention/tiling-shapes
"""Attack: tile_shapes passes every dimension through np.int32, as a CUDA kernel's shape fields might
hold them; the numbers wrap silently past 2**31: tile_shapes(2**40 + 1, 2**31 + 3, ...) gives
L = (1,) and Q_i a negative head dimension.

Slipped past, before the checks were changed, every shape check: no s, d, Br or Bc given to
tile_shapes passed 20000, and numpy integers count as ints. test_huge_sizes_exact now asks
tile_shapes at sizes past 2**31 and 2**63.
"""
import numpy as np


def block_sizes(M, d):
    bc = -(-M // (4 * d))
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return -(-s // Br), -(-s // Bc)


def _shape(*dims):
    return tuple(np.array(dims, dtype=np.int64).astype(np.int32))  # WRONG: wraps past 2**31


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": _shape(Br, d), "K_j": _shape(Bc, d), "V_j": _shape(Bc, d), "S_ij": _shape(Br, Bc),
            "P_ij": _shape(Br, Bc), "O_i": _shape(Br, d), "m_i": _shape(Br), "l_i": _shape(Br), "L": _shape(s)}


def hbm_elements(s, d, Br, Bc):
    tr = -(-s // Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
