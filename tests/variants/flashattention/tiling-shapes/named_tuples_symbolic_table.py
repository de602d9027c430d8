# drill: flashattention/tiling-shapes
# variant: results as namedtuples (Blocks(Br, Bc), Counts(Tr, Tc)) and an OrderedDict of traffic; tile shapes resolved from a table of dimension names ("Br", "d") through a dict of sizes; ceilings as divmod quotients plus bool(remainder)
"""Tiling by name: each tile's shape is written as dimension names, looked up at call time."""

from collections import OrderedDict, namedtuple

Blocks = namedtuple("Blocks", "Br Bc")
Counts = namedtuple("Counts", "Tr Tc")

TILES = {"Q_i": ("Br", "d"), "K_j": ("Bc", "d"), "V_j": ("Bc", "d"), "S_ij": ("Br", "Bc"), "P_ij": ("Br", "Bc"),
         "O_i": ("Br", "d"), "m_i": ("Br",), "l_i": ("Br",), "L": ("s",)}


def _cdiv(a, b):
    q, r = divmod(a, b)
    return q + bool(r)


def block_sizes(M, d):
    Bc = _cdiv(M, 4 * d)
    return Blocks(min(Bc, d), Bc)


def num_blocks(s, Br, Bc):
    return Counts(_cdiv(s, Br), _cdiv(s, Bc))


def tile_shapes(s, d, Br, Bc):
    size = {"s": s, "d": d, "Br": Br, "Bc": Bc}
    return {name: tuple(size[dim] for dim in dims) for name, dims in TILES.items()}


def hbm_elements(s, d, Br, Bc):
    Tr = num_blocks(s, Br, Bc).Tr
    per_array = s * d
    standard = OrderedDict(QKV_read=3 * per_array, O_write=per_array, S_write_read=2 * s * s, P_write_read=2 * s * s)
    flash = OrderedDict(Q_read=per_array, KV_read=2 * Tr * per_array, O_write=per_array, L_write=s)
    return OrderedDict(standard=sum(standard.values()), flash=sum(flash.values()))
