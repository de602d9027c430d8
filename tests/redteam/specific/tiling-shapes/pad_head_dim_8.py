# drill: flashattention/tiling-shapes
"""Attack: rounds the head dimension up to a multiple of 8 (as if padding for tensor cores) in
block_sizes, tile_shapes and hbm_elements, though the statement's formulas take d as given:
block_sizes(30000, 100) gives (73, 73) instead of (75, 75). Right whenever d is already a multiple
of 8, or below 8.

Slipped past, before the checks were changed, every check: each fixed d was 1 or a multiple of 8,
and the random draws picked d from a list of multiples of 16. test_odd_head_dims (d = 3, 7, 77,
100, ...) and the random draws, half of whose d are now any size, catch it.
"""


def _ceil(a, b):
    return -(-a // b)


def _pad(d):
    return -(-d // 8) * 8 if d >= 8 else d  # WRONG: d is not padded


def block_sizes(M, d):
    d = _pad(d)
    bc = _ceil(M, 4 * d)
    return min(bc, d), bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


def tile_shapes(s, d, Br, Bc):
    d = _pad(d)
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def hbm_elements(s, d, Br, Bc):
    d = _pad(d)
    tr = _ceil(s, Br)
    return {"standard": 4 * s * d + 4 * s * s, "flash": 2 * s * d + 2 * tr * s * d + s}
