# drill: flashattention/tiling-shapes
# variant: ceilings from divmod with an if, flash traffic accumulated Q block by Q block over the real (ragged) row counts with range(0, s, Br), Python ints only
"""Tiling with the FA2 outer loop walked over Q blocks only."""


def _ceil(a, b):
    q, r = divmod(a, b)
    if r:
        q += 1
    return q


def block_sizes(M, d):
    Bc = _ceil(M, 4 * d)
    Br = Bc
    if Br > d:
        Br = d
    return Br, Bc


def num_blocks(s, Br, Bc):
    return _ceil(s, Br), _ceil(s, Bc)


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
    standard = 4 * s * d + 4 * s * s
    flash = 0
    for start in range(0, s, Br):        # one iteration per Q block (Tr of them)
        rows = min(Br, s - start)        # the last block may be partial
        flash += rows * d                # read Q_i
        flash += 2 * s * d               # stream all of K and V past it
        flash += rows * d + rows         # write O_i and its rows of L
    return {"standard": standard, "flash": flash}
