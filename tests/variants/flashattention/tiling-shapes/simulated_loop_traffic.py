# drill: flashattention/tiling-shapes
# variant: ceilings as (a - 1) // b + 1, and FlashAttention's traffic counted by walking the FA2 loops block by block (ragged last blocks included)
"""Tiling with the traffic tallied by simulating the tiled loops."""


def _cdiv(a, b):
    return (a - 1) // b + 1  # integer ceiling; also 0 for a = 0


def block_sizes(M, d):
    per_tile_rows = _cdiv(M, 4 * d)  # rows of d columns each of the four tiles may have
    return min(per_tile_rows, d), per_tile_rows


def num_blocks(s, Br, Bc):
    return _cdiv(s, Br), _cdiv(s, Bc)


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
    # Standard attention: Q, K, V in, O out, and the s x s matrices S and P each written then read back.
    standard = 3 * s * d + s * d + 2 * (s * s) + 2 * (s * s)

    # FlashAttention-2: walk the loops and count what crosses HBM.
    Tr, Tc = num_blocks(s, Br, Bc)
    flash = 0
    for i in range(Tr):
        rows = min(Br, s - i * Br)
        flash += rows * d               # Q_i, loaded once
        for j in range(Tc):
            cols = min(Bc, s - j * Bc)
            flash += 2 * cols * d       # K_j and V_j, once per Q block
        flash += rows * d + rows        # O_i and this block's slice of L, written once
    return {"standard": standard, "flash": flash}
