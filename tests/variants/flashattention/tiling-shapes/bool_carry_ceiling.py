# drill: flashattention/tiling-shapes
# variant: ceiling as a // b plus a boolean carry (a % b != 0), shapes from a small row/column spec table, traffic as a per-array ledger
"""Tiling with a carry-bit ceiling and an explicit traffic ledger."""


def _ceil(a, b):
    return a // b + int(a % b != 0)


def block_sizes(M, d):
    Bc = _ceil(M, 4 * d)
    Br = d if Bc > d else Bc
    return Br, Bc


def num_blocks(s, Br, Bc):
    Tr = _ceil(s, Br)
    Tc = _ceil(s, Bc)
    return Tr, Tc


def tile_shapes(s, d, Br, Bc):
    dims = {"r": Br, "c": Bc, "d": d, "s": s}
    spec = {"Q_i": "rd", "K_j": "cd", "V_j": "cd", "S_ij": "rc", "P_ij": "rc",
            "O_i": "rd", "m_i": "r", "l_i": "r", "L": "s"}
    return {name: tuple(dims[ch] for ch in axes) for name, axes in spec.items()}


def hbm_elements(s, d, Br, Bc):
    Tr, _ = num_blocks(s, Br, Bc)
    standard_ledger = {
        "read Q": s * d, "read K": s * d, "read V": s * d,
        "write S": s * s, "read S": s * s, "write P": s * s, "read P": s * s,
        "write O": s * d,
    }
    flash_ledger = {
        "read Q": s * d,
        "read K": Tr * s * d,   # every Q block streams all of K
        "read V": Tr * s * d,
        "write O": s * d,
        "write L": s,
    }
    return {"standard": sum(standard_ledger.values()), "flash": sum(flash_ledger.values())}
