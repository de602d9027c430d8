# drill: flashattention/tiling-shapes
# variant: ceilings with operator.floordiv on negated operands, tile_shapes through dict(...) keywords, traffic as FA2 per-block sums (K/V read once per Q block: Tr * (K + V)) computed with sum() over a list of terms
"""Tiling with the ceiling as negated floor division and traffic as a list of terms."""

from operator import floordiv, neg


def cdiv(a, b):
    return neg(floordiv(neg(a), b))


def block_sizes(M, d):
    per_tile_rows = cdiv(M, 4 * d)   # four tiles of d columns share the SRAM
    Br = per_tile_rows if per_tile_rows < d else d
    return (Br, per_tile_rows)


def num_blocks(s, Br, Bc):
    return tuple(cdiv(s, b) for b in (Br, Bc))


def tile_shapes(s, d, Br, Bc):
    return dict(Q_i=(Br, d), K_j=(Bc, d), V_j=(Bc, d), S_ij=(Br, Bc), P_ij=(Br, Bc),
                O_i=(Br, d), m_i=(Br,), l_i=(Br,), L=(s,))


def hbm_elements(s, d, Br, Bc):
    Tr, _ = num_blocks(s, Br, Bc)
    standard = sum([s * d] * 3 + [s * d] + [s * s] * 4)      # Q K V in, O out, S/P each written and read
    flash = sum([s * d,                    # Q, read once
                 Tr * s * d, Tr * s * d,   # K and V, streamed once for each of the Tr Q blocks
                 s * d,                    # O written once
                 s])                       # L written once
    return {"standard": standard, "flash": flash}
