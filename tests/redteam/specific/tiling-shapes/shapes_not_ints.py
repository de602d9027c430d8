# drill: flashattention/tiling-shapes
"""Attack: tile_shapes returns shapes that are not tuples of ints: a list, strings and floats with
fractional parts (S_ij = (Br + 0.5, Bc + 0.9)); np.zeros(shape) raises on every one of them.

Slipped past, before the checks were changed, the shape checks: they compared
tuple(int(v) for v in shape), which truncates floats, parses strings and accepts a list.
"""


def _ceil(a, b):
    return -(-a // b)


def block_sizes(M, d):
    bc = _ceil(M, 4 * d)
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


def tile_shapes(s, d, Br, Bc):
    # WRONG: a list, strings, floats
    return {"Q_i": [Br / 1, d * 1.0], "K_j": (str(Bc), str(d)), "V_j": (Bc + 0.99, d), "S_ij": (Br + 0.5, Bc + 0.9),
            "P_ij": (Br, Bc), "O_i": (Br, d), "m_i": (Br + 0.7,), "l_i": (Br,), "L": (s + 0.5,)}


def hbm_elements(s, d, Br, Bc):
    tr = _ceil(s, Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
