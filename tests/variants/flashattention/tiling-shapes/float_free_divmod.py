# drill: flashattention/tiling-shapes
# variant: ceilings with divmod, shapes keyed from a loop over the tile names
"""Tiling with divmod ceilings."""


def _blocks(n, size):
    whole, rest = divmod(n, size)
    return whole + (1 if rest else 0)


def block_sizes(M, d):
    Bc = _blocks(M, 4 * d)
    return min(d, Bc), Bc


def num_blocks(s, Br, Bc):
    return _blocks(s, Br), _blocks(s, Bc)


def tile_shapes(s, d, Br, Bc):
    shapes = {}
    for name in ("Q_i", "O_i"):
        shapes[name] = (Br, d)
    for name in ("K_j", "V_j"):
        shapes[name] = (Bc, d)
    for name in ("S_ij", "P_ij"):
        shapes[name] = (Br, Bc)
    for name in ("m_i", "l_i"):
        shapes[name] = (Br,)
    shapes["L"] = (s,)
    return shapes


def hbm_elements(s, d, Br, Bc):
    Tr, _Tc = num_blocks(s, Br, Bc)
    return {"standard": 4 * s * (d + s), "flash": s * (2 * d + 2 * Tr * d + 1)}
