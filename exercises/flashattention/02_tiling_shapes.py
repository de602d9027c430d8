# drill: flashattention/tiling-shapes
"""Tiling: how big the blocks are, what shape each tile has, and how much HBM traffic it saves.

FlashAttention cuts Q into Tr blocks of Br rows and K, V into Tc blocks of Bc rows.
With SRAM of M elements, four tiles of d columns (Q_i, K_j, V_j, O_i) must fit at once:

    Bc = ceil(M / (4d))        Br = min(ceil(M / (4d)), d)

Example: M = 16384 elements, d = 64  ->  Bc = 64, Br = 64.

Check your work:  drill check 02_tiling_shapes.py
"""


def block_sizes(M, d):
    """(Br, Bc), a tuple of ints, for SRAM of M elements and head dimension d (any positive ints)."""
    # TODO: Bc = ceil(M / (4d)); Br = min(ceil(M / (4d)), d).
    raise NotImplementedError


def num_blocks(s, Br, Bc):
    """(Tr, Tc), a tuple: how many Q blocks and K/V blocks cover a sequence of length s (the last may be partial)."""
    # TODO: ceiling division, without floating point.
    raise NotImplementedError


def tile_shapes(s, d, Br, Bc):
    """Shapes (tuples) of every tile, keyed Q_i K_j V_j S_ij P_ij O_i m_i l_i L.

    Nominal block shapes: Q_i is (Br, d) even when s < Br. L is the logsumexp of every
    row of the whole sequence, saved for the backward pass.

    >>> tile_shapes(1024, 64, 128, 64)["S_ij"]   # (128, 64)
    """
    # TODO: one entry per key; think about which dimension comes from Br and which from Bc.
    raise NotImplementedError


def hbm_elements(s, d, Br, Bc):
    """Elements moved between HBM and SRAM: {"standard": ..., "flash": ...} (ints).

    standard: read Q, K, V and write O, plus write S, read S, write P, read P.
    flash:    FlashAttention-2 order: Q read once, K and V read once per Q block,
              O and L written once.
    """
    # TODO: count each array moved, in elements, for both algorithms.
    raise NotImplementedError
