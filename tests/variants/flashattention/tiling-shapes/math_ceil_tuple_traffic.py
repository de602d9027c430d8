# drill: flashattention/tiling-shapes
# variant: ceilings through integer (a + b - 1) // b, the tile table built from pairs, traffic summed term by term
"""Tiling written with the (a + b - 1) // b ceiling and the traffic counted per tensor."""


def block_sizes(M, d):
    columns = (M + 4 * d - 1) // (4 * d)  # four d-wide tiles share the SRAM
    return (d if columns > d else columns), columns


def num_blocks(s, Br, Bc):
    return (s + Br - 1) // Br, (s + Bc - 1) // Bc


def tile_shapes(s, d, Br, Bc):
    rows = [("Q_i", (Br, d)), ("K_j", (Bc, d)), ("V_j", (Bc, d)), ("S_ij", (Br, Bc)), ("P_ij", (Br, Bc)),
            ("O_i", (Br, d)), ("m_i", (Br,)), ("l_i", (Br,)), ("L", (s,))]
    return dict(rows)


def hbm_elements(s, d, Br, Bc):
    Tr = num_blocks(s, Br, Bc)[0]
    inputs_outputs = 4 * s * d  # read Q, K, V, write O
    scores = 2 * s * s + 2 * s * s  # S written and read, P written and read
    flash = s * d  # Q, read once
    flash += Tr * (s * d + s * d)  # every Q block reads all of K and V
    flash += s * d + s  # O and L written once
    return {"standard": inputs_outputs + scores, "flash": flash}
