# drill: flashattention/tiling-shapes
# planted: ceiling division as int(a / b + 0.9999), in floating point: wrong once b passes 10^4
# expect-fail: Sizes far past any GPU's
"""Planted mistake: a floating-point ceiling with a fudge term, exact only for small divisors."""



def _ceil(a, b):
    return int(a / b + 0.9999)


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
