# drill: flashattention/tiling-shapes
# variant: exact ceilings through math.ceil of a fractions.Fraction, the sizes bundled in a small dataclass whose methods build the shapes and the traffic
"""Tiling worked out on a small Tiling object, with exact rational ceilings."""

import math
from dataclasses import dataclass
from fractions import Fraction


def _ceil(a, b):
    return math.ceil(Fraction(a, b))   # exact: a Fraction never rounds


@dataclass(frozen=True)
class Tiling:
    s: int
    d: int
    Br: int
    Bc: int

    @property
    def Tr(self):
        return _ceil(self.s, self.Br)

    def shapes(self):
        row, col = (self.Br,), (self.Bc,)
        return {"Q_i": row + (self.d,), "K_j": col + (self.d,), "V_j": col + (self.d,),
                "S_ij": row + col, "P_ij": row + col, "O_i": row + (self.d,),
                "m_i": row, "l_i": row, "L": (self.s,)}

    def traffic(self):
        s, d = self.s, self.d
        qkvo = 4 * s * d
        scores = 2 * s * s          # S written, then read back
        probs = 2 * s * s           # P written, then read back
        flash = s * d + 2 * self.Tr * s * d + s * d + s   # Q, K+V per Q block, O, L
        return {"standard": qkvo + scores + probs, "flash": flash}


def block_sizes(M, d):
    Bc = _ceil(M, 4 * d)
    return (min(d, Bc), Bc)


def num_blocks(s, Br, Bc):
    return (_ceil(s, Br), _ceil(s, Bc))


def tile_shapes(s, d, Br, Bc):
    return Tiling(s, d, Br, Bc).shapes()


def hbm_elements(s, d, Br, Bc):
    return Tiling(s, d, Br, Bc).traffic()
