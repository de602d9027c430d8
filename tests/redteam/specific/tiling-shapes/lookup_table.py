# drill: flashattention/tiling-shapes
# Attack: answer right only on the fixed examples the checks are known to use (a lookup table
# of exactly the checked values) and wrong everywhere else. The checks' randomly drawn sizes,
# fresh every run, must catch it.
SRAM_GRID = {(16384, 64), (116736, 128), (116736, 64), (100000, 128), (1000, 64), (4096, 32), (65537, 16),
             (12, 1), (2048, 256)}
S_GRID = {1, 64, 100, 1000, 4097, 1024, 7, 4097, 10, 2048, 4096, 8192}


def _ceil(a, b):
    return -(-a // b)


def block_sizes(M, d):
    bc = _ceil(M, 4 * d) if (M, d) in SRAM_GRID else M // (4 * d)
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    if s in S_GRID:
        return _ceil(s, Br), _ceil(s, Bc)
    return s // Br, s // Bc


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    tr = _ceil(s, Br) if s in S_GRID else s // Br
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
