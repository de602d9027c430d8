# drill: flashattention/tiling-shapes
"""Attack: block_sizes and num_blocks return lists, [Br, Bc] and [Tr, Tc], where the statement
asks for the tuples (Br, Bc) and (Tr, Tc).

Slipped past, before the checks were changed, every check: the helper that read the pair took
tuple(value), so any iterable of two ints passed (a list, an array, even a generator). It now
requires a tuple, as tile_shapes' shapes already must be.
"""


def _ceil(a, b):
    return -(-a // b)


def block_sizes(M, d):
    bc = _ceil(M, 4 * d)
    return [min(bc, d), bc]  # WRONG: a list


def num_blocks(s, Br, Bc):
    return [_ceil(s, Br), _ceil(s, Bc)]  # WRONG: a list


def tile_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    tr = _ceil(s, Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
