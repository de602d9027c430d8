# drill: flashattention/tiling-shapes
"""Attack: block_sizes answers (0, 0) when M < 4d ("not even one row of each tile fits"), though
the statement's formula gives Bc = ceil(M / (4d)) = 1 and Br = 1 there.

Slipped past, before the checks were changed, every check: the smallest fixed SRAM was M = 12 for
d = 1 (M >= 4d), and M drawn from [64, 300000) fell below 4d about one run in a hundred.
test_odd_head_dims now asks block_sizes(100, 64), (200, 128), (1, 1), and a quarter of the random
draws take M below 4d.
"""


def _ceil(a, b):
    return -(-a // b)


def block_sizes(M, d):
    if M < 4 * d:
        return 0, 0  # WRONG: the formula gives (1, 1)
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
