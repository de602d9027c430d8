# drill: flashattention/tiling-shapes
# planted: the head dimension is padded up to a multiple of 16 before the SRAM is shared out
# expect-fail: Head dimensions no multiple of 8


def _ceil_div(a, b):
    # Integer ceiling without floats: exact for any size.
    return -(-a // b)


def block_sizes(M, d):
    """(Br, Bc) so that Q_i, K_j, V_j and O_i (four tiles of d columns) fit in M elements."""
    d = _ceil_div(d, 16) * 16  # padded as if for tensor cores: the formula takes d as given
    Bc = _ceil_div(M, 4 * d)
    Br = min(Bc, d)
    return Br, Bc


def num_blocks(s, Br, Bc):
    """(Tr, Tc): the last block of each may be partial (ragged)."""
    return _ceil_div(s, Br), _ceil_div(s, Bc)


def tile_shapes(s, d, Br, Bc):
    """Every tile's nominal shape."""
    return {
        "Q_i": (Br, d),  # one block of query rows, kept in SRAM for the whole inner loop
        "K_j": (Bc, d),  # one block of keys, streamed
        "V_j": (Bc, d),  # the matching values
        "S_ij": (Br, Bc),  # Q_i K_jᵀ: never written to HBM
        "P_ij": (Br, Bc),  # exp(S_ij - m): same shape, also SRAM only
        "O_i": (Br, d),  # unnormalised output accumulator
        "m_i": (Br,),  # running max per query row
        "l_i": (Br,),  # running sum per query row
        "L": (s,),  # logsumexp per row of the whole sequence, saved for backward
    }


def hbm_elements(s, d, Br, Bc):
    """Elements moved between HBM and SRAM by standard attention and by FlashAttention-2."""
    Tr, _ = num_blocks(s, Br, Bc)
    standard = 4 * s * d + 4 * s * s  # Q, K, V, O  +  write S, read S, write P, read P
    flash = 2 * s * d + 2 * Tr * s * d + s  # Q once, O once; K and V once per Q block; L once
    return {"standard": standard, "flash": flash}
