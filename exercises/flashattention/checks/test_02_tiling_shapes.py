"""Hidden checks for 02_tiling_shapes.py."""

import numpy as np
import pytest

from drill import iocount
from drill.grader.expect import Call, fail, show

KEYS = ("Q_i", "K_j", "V_j", "S_ij", "P_ij", "O_i", "m_i", "l_i", "L")

# (M in elements, d): ragged M (not a multiple of 4d) included; M = 116736 is an
# H100/H200-sized 228 KB of shared memory holding 2-byte elements.
# The last three give Br = d above 128 (M >= 4d^2): Br is capped at d and at nothing else.
SRAM_GRID = [(16384, 64), (116736, 128), (116736, 64), (100000, 128), (1000, 64), (4096, 32), (65537, 16),
             (12, 1), (2048, 256), (300000, 256), (100001, 150), (4 * 1024 * 1024, 1024)]
SHAPE_GRID = [(1024, 64, 128, 64), (1000, 64, 64, 64), (100, 128, 128, 32), (7, 16, 16, 16), (4097, 32, 48, 80),
              (1, 8, 4, 4)]
SHAPE_PARAMS = [pytest.param(*v, id=f"s={v[0]} d={v[1]} Br={v[2]} Bc={v[3]}") for v in SHAPE_GRID]


def _ceil(a, b):
    return -(-a // b)


def _is_int(v) -> bool:
    """A Python int or a numpy integer (a 0-d integer array too); never a bool or a float."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, np.ndarray):
        return v.ndim == 0 and v.dtype.kind in "iu"
    return isinstance(v, (int, np.integer))


def _ints(value, n, call):
    if not isinstance(value, tuple):
        fail(f"{call} must return a tuple of {n} integers", called=str(call), got=show(value),
             hint="return a tuple, like (Br, Bc): not a list, an array or a generator")
    items = value
    if len(items) != n or not all(_is_int(v) for v in items):
        fail(f"{call} must return a tuple of {n} integers", called=str(call), got=show(value),
             hint="use integer arithmetic (// and -(-a // b)); math.ceil on a float returns an int too, "
                  "but a float division can round wrong for large sizes")
    return tuple(int(v) for v in items)


def test_block_sizes(sub):
    """Br and Bc from the SRAM size, ragged M included"""
    for M, d in SRAM_GRID:
        call = Call("block_sizes", f"M={M}, d={d}")
        got = _ints(sub.block_sizes(M, d), 2, call)
        bc = _ceil(M, 4 * d)
        want = (min(bc, d), bc)
        if got == want:
            continue
        floor = (min(M // (4 * d), d), M // (4 * d))
        hint = ""
        if got == floor:
            hint = "floor instead of ceil: Bc = ceil(M / (4d))"
        elif got == want[::-1]:
            hint = "Br and Bc are swapped: the function returns (Br, Bc), and Br is the one capped at d"
        elif got == (bc, bc):
            hint = "Br must be capped at d: Br = min(ceil(M / (4d)), d)"
        elif got[1] == bc and got[0] < want[0]:
            hint = "Br is capped at d and nothing else (no fixed limit such as 128 rows): Br = min(ceil(M / (4d)), d)"
        fail("wrong block sizes", called=str(call), got=f"(Br, Bc) = {got}", expected=f"(Br, Bc) = {want}", hint=hint)


@pytest.mark.parametrize("s", [1, 64, 100, 1000, 4097], ids=lambda s: f"s={s}")
def test_num_blocks(sub, s):
    """Block counts cover a ragged sequence"""
    for Br, Bc in ((64, 64), (128, 32), (48, 80), (1, 7)):
        call = Call("num_blocks", f"s={s}, Br={Br}, Bc={Bc}")
        got = _ints(sub.num_blocks(s, Br, Bc), 2, call)
        want = (_ceil(s, Br), _ceil(s, Bc))
        if got != want:
            hint = ""
            if got == (s // Br, s // Bc):
                hint = "floor division drops the last, partial block: use ceiling division"
            elif got == want[::-1]:
                hint = "Tr counts Q blocks (of Br rows) and Tc counts K/V blocks (of Bc rows)"
            fail("wrong number of blocks", called=str(call), got=f"(Tr, Tc) = {got}", expected=f"(Tr, Tc) = {want}",
                 hint=hint)


def test_huge_sizes_exact(sub):
    """Sizes far past any GPU's, a remainder of 1 key or byte over a huge block: ceilings and traffic stay exact"""
    # Past 2**53 a float cannot hold the size itself (math.ceil(a / b) rounds a first); past 2**63
    # np.int64 cannot either, past 2**64 nor can np.longdouble, and a decimal.Decimal keeps 28 digits
    # (10**40 + 1 is past both). Python ints are exact at any size.
    for s, Br, Bc in [(20_001, 20_000, 20_000), (10**9 + 1, 10**6, 999_983), (2**40 + 1, 2**20, 2**40),
                      (2**60 + 1, 2, 2), (2**62 + 1, 2**31, 3), (2**70 + 1, 2**35, 2**69),
                      (10**40 + 1, 10**20, 10**39)]:
        call = Call("num_blocks", f"s={s}, Br={Br}, Bc={Bc}")
        got = _ints(sub.num_blocks(s, Br, Bc), 2, call)
        want = (_ceil(s, Br), _ceil(s, Bc))
        if got != want:
            fail("wrong number of blocks", called=str(call), got=f"(Tr, Tc) = {got}", expected=f"(Tr, Tc) = {want}",
                 hint="a ceiling made with floats (a / b plus a fudge, rounding, np.longdouble or a Decimal) misses a "
                      "remainder this small: "
                      "use integers, -(-a // b)")
    for M, d in [(4 * 4096 * 3 + 1, 4096), (4 * 8192 * 5 + 1, 8192), (2**63 + 1, 64), (2**70 + 1, 64),
                 (4 * 64 * 10**40 + 1, 64)]:
        call = Call("block_sizes", f"M={M}, d={d}")
        got = _ints(sub.block_sizes(M, d), 2, call)
        bc = _ceil(M, 4 * d)
        if got != (min(bc, d), bc):
            fail("wrong block sizes", called=str(call), got=f"(Br, Bc) = {got}", expected=f"(Br, Bc) = {(min(bc, d), bc)}",
                 hint="a ceiling made with floats (np.longdouble and Decimal too) misses a remainder this small: "
                      "use integers, -(-M // (4 * d))")
    # Shapes past 2**31 and 2**63: a shape held in np.int32 (or np.int64) wraps.
    for s, d, Br, Bc in [(2**40 + 1, 2**31 + 3, 2**33 + 1, 2**32 + 5), (2**70 + 1, 3, 2**64 + 1, 2**63 + 7)]:
        call, shapes = _shapes(sub, s, d, Br, Bc)
        _compare_shapes(call, shapes, _expected_shapes(s, d, Br, Bc))
    # Few, huge blocks: a count made by walking the tiled loops stays quick. s = 2**31 - 1 and 2**32 - 1
    # fit in 32 bits, yet 4·s² does not fit in 63: an np.int64 count kept for such "small" s wraps.
    for s, d, Br, Bc in [(10**8 + 1, 128, 10**7, 10**7), (2**31 - 1, 128, 2**20, 2**20),
                         (2**32 - 1, 64, 2**24, 2**22), (3 * 10**9 + 1, 128, 10**9, 10**9),
                         (2**50 + 1, 128, 2**48, 2**48)]:
        call, got = _traffic(sub, s, d, Br, Bc)
        want = REFERENCES["hbm_elements"](s, d, Br, Bc)
        if {k: int(got[k]) for k in want} != want:
            fail("wrong traffic", called=str(call), got=show(got), expected=show(want),
                 hint="counts this large need exact integers: a float is inexact past 2**53 and np.int64 wraps "
                      "past 2**63; Python ints (plain s, d, Br and // arithmetic) never are")


def _expected_shapes(s, d, Br, Bc):
    return {"Q_i": (Br, d), "K_j": (Bc, d), "V_j": (Bc, d), "S_ij": (Br, Bc), "P_ij": (Br, Bc),
            "O_i": (Br, d), "m_i": (Br,), "l_i": (Br,), "L": (s,)}


def _shapes(sub, s, d, Br, Bc):
    call = Call("tile_shapes", f"s={s}, d={d}, Br={Br}, Bc={Bc}")
    got = sub.tile_shapes(s, d, Br, Bc)
    if not isinstance(got, dict):
        fail(f"{call} must return a dict", called=str(call), got=show(got))
    missing = [k for k in KEYS if k not in got]
    if missing:
        fail(f"missing keys: {', '.join(missing)}", called=str(call), got=f"keys {sorted(got)}",
             expected=f"keys {list(KEYS)}")
    return call, got


HINTS = {
    "S_ij": "S_ij = Q_i K_jᵀ is (Br, Bc): rows from the Q block, columns from the K block; yours looks transposed",
    "P_ij": "P_ij has the shape of S_ij, (Br, Bc)",
    "Q_i": "Q_i holds Br query rows of d numbers each",
    "O_i": "O_i accumulates the output for the Br rows of Q_i: (Br, d)",
    "K_j": "K_j and V_j hold Bc rows of d numbers each",
    "V_j": "K_j and V_j hold Bc rows of d numbers each",
    "m_i": "the statistics hold one number per query row of the block: (Br,)",
    "l_i": "the statistics hold one number per query row of the block: (Br,)",
    "L": "L keeps one logsumexp per row of the whole sequence: (s,)",
}


def _shape_types(call, got):
    """Every shape is a tuple of ints, as numpy wants one (np.zeros(shape))."""
    for key in KEYS:
        value = got[key]
        if not isinstance(value, tuple) or not all(_is_int(v) for v in value):
            fail(f"the shape of {key} is not a tuple of ints", called=str(call), got=f"{key}: {show(value)}",
                 hint="a shape is a tuple of integers, like (Br, d) or (s,): not a list, a string or a float")


def _compare_shapes(call, got, want):
    _shape_types(call, got)
    for key in KEYS:
        value = tuple(int(v) for v in got[key])
        if value != want[key]:
            fail(f"wrong shape for {key}", called=str(call), got=f"{key}: {value}", expected=f"{key}: {want[key]}",
                 hint=HINTS[key])


def test_tile_shapes(sub):
    """Every tile's shape over a grid of (s, d, Br, Bc)"""
    for s, d, Br, Bc in SHAPE_GRID:
        call, got = _shapes(sub, s, d, Br, Bc)
        _compare_shapes(call, got, _expected_shapes(s, d, Br, Bc))


def test_tile_shapes_nominal(sub):
    """Tiles keep their nominal shape when the sequence is shorter than a block"""
    call, got = _shapes(sub, 10, 64, 128, 64)
    want = _expected_shapes(10, 64, 128, 64)
    _shape_types(call, got)
    for key in ("Q_i", "O_i", "K_j", "S_ij"):
        value = tuple(int(v) for v in got[key])
        if 10 in value and 10 not in want[key]:
            fail(f"{key} was clipped to the sequence length", called=str(call), got=f"{key}: {value}",
                 expected=f"{key}: {want[key]}", hint="report the nominal block shape (Br or Bc), not min(block, s)")
    _compare_shapes(call, got, want)


def _traffic(sub, s, d, Br, Bc):
    call = Call("hbm_elements", f"s={s}, d={d}, Br={Br}, Bc={Bc}")
    got = sub.hbm_elements(s, d, Br, Bc)
    if not isinstance(got, dict) or "standard" not in got or "flash" not in got:
        fail(f"{call} must return a dict with keys 'standard' and 'flash'", called=str(call), got=show(got))
    for key in ("standard", "flash"):
        if not _is_int(got[key]):
            fail(f"the {key} count is not an int", called=str(call), got=f"{key}: {show(got[key])}",
                 hint="count elements with integer arithmetic: a float (from true division /, np.ceil or a numpy "
                      "float) is inexact past 2**53; use // and -(-a // b)")
    return call, got


@pytest.mark.parametrize("s, d, Br, Bc", SHAPE_PARAMS)
def test_standard_traffic(sub, s, d, Br, Bc):
    """HBM traffic of standard attention"""
    call, got = _traffic(sub, s, d, Br, Bc)
    want = iocount.standard_elements(s, d)  # the count `drill show io` teaches
    if got["standard"] != want:
        hint = ""
        if got["standard"] == 4 * s * d + 2 * s * s:
            hint = "count S and P both ways: S is written then read, P is written then read (4·s² in all)"
        elif got["standard"] in (3 * s * d + 4 * s * s, 4 * s * s):
            hint = "add reading Q, K, V and writing O: 4·s·d"
        fail("wrong traffic for standard attention", called=str(call), got=str(got["standard"]),
             expected=f"{want} = 4·s·d + 4·s²", hint=hint)


@pytest.mark.parametrize("s, d, Br, Bc", SHAPE_PARAMS)
def test_flash_traffic(sub, s, d, Br, Bc):
    """HBM traffic of FlashAttention-2"""
    call, got = _traffic(sub, s, d, Br, Bc)
    tr, tc = _ceil(s, Br), _ceil(s, Bc)
    want = iocount.flash_elements(s, d, Br)  # the count `drill show io` teaches and 03 measures
    if got["flash"] != want:
        hint = ""
        if got["flash"] == 2 * s * d + 2 * tc * s * d + s and tc != tr:
            hint = "K and V are re-read once per Q block: multiply by Tr = ceil(s/Br), not Tc"
        elif got["flash"] == 2 * s * d + 2 * tr * s * d:
            hint = "writing L (one logsumexp per row, s elements) is part of the traffic"
        elif got["flash"] == 2 * s * d + 2 * (s // Br) * s * d + s:
            hint = "Tr must count the partial last block: ceil(s/Br)"
        elif got["flash"] == 4 * s * d + s:
            hint = "K and V are not read once in total: every Q block streams all of K and V again"
        fail("wrong traffic for FlashAttention-2", called=str(call), got=str(got["flash"]),
             expected=f"{want} = 2·s·d + 2·Tr·s·d + s (Tr = {tr})", hint=hint)


def test_traffic_saving_grows(sub):
    """FlashAttention moves fewer elements than standard attention once s is large"""
    ratios = []
    for s in (1024, 2048, 4096, 8192):
        _, got = _traffic(sub, s, 64, 128, 128)
        ratios.append(got["standard"] / got["flash"])
    if not all(b > a for a, b in zip(ratios, ratios[1:])) or ratios[-1] <= 1:
        fail("the saving should grow with s", called="hbm_elements(s, 64, 128, 128) for s = 1024 … 8192",
             got="standard/flash = " + ", ".join(f"{r:.2f}" for r in ratios),
             expected="a ratio above 1 that grows with s toward 2·Br/d")


# What each function should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {
    "block_sizes": lambda M, d: (min(_ceil(M, 4 * d), d), _ceil(M, 4 * d)),
    "num_blocks": lambda s, Br, Bc: (_ceil(s, Br), _ceil(s, Bc)),
    "tile_shapes": lambda s, d, Br, Bc: _expected_shapes(s, d, Br, Bc),
    "hbm_elements": lambda s, d, Br, Bc: {"standard": iocount.standard_elements(s, d),
                                          "flash": iocount.flash_elements(s, d, Br)},
}


# Head dimensions that are no multiple of 8 or 16, and SRAM too small to hold one row of each of the
# four tiles (M < 4d, where the formula still gives Bc = Br = 1).
ODD_SRAM = [(100, 64), (200, 128), (1, 1), (30000, 100), (7777, 3), (50001, 77), (4 * 9 * 5 - 1, 9)]
ODD_SHAPES = [(513, 7, 5, 3), (999, 100, 96, 33), (10, 1, 1, 1), (4097, 77, 40, 24), (300, 200, 512, 1)]


def test_odd_head_dims(sub):
    """Head dimensions no multiple of 8, and SRAM smaller than one row of each tile"""
    for M, d in ODD_SRAM:
        call = Call("block_sizes", f"M={M}, d={d}")
        got = _ints(sub.block_sizes(M, d), 2, call)
        want = REFERENCES["block_sizes"](M, d)
        if got != want:
            hint = ("SRAM below 4d still gives one row per tile: ceil(M / (4d)) = 1" if M < 4 * d else
                    "use d as given: the formula holds for any head dimension, not only multiples of 8 or 16")
            fail("wrong block sizes", called=str(call), got=f"(Br, Bc) = {got}", expected=f"(Br, Bc) = {want}",
                 hint=hint)
    for s, d, Br, Bc in ODD_SHAPES:
        call, shapes = _shapes(sub, s, d, Br, Bc)
        _compare_shapes(call, shapes, _expected_shapes(s, d, Br, Bc))
        call, traffic = _traffic(sub, s, d, Br, Bc)
        want = REFERENCES["hbm_elements"](s, d, Br, Bc)
        if {k: int(traffic[k]) for k in want} != want:
            fail("wrong traffic", called=str(call), got=show(traffic), expected=show(want),
                 hint="count with d as given: an odd head dimension is not padded")


def test_random_sizes(sub, rng):
    """Every function on sizes drawn at random for this run (no table of the fixed examples can answer)"""
    for i in range(16):
        # Half the head dimensions are common ones, half any size (odd ones too); a quarter of the SRAM
        # sizes are below 4d, so Bc = 1.
        d = int(rng.choice([16, 32, 48, 64, 80, 96, 128, 256])) if i % 2 else int(rng.integers(1, 300))
        M = int(rng.integers(1, 4 * d)) if i % 4 == 0 else int(rng.integers(64, 300_000))
        call = Call("block_sizes", f"M={M}, d={d}")
        want = REFERENCES["block_sizes"](M, d)
        got = _ints(sub.block_sizes(M, d), 2, call)
        if got != want:
            fail("wrong block sizes", called=str(call), got=f"(Br, Bc) = {got}", expected=f"(Br, Bc) = {want}")
        s, Br, Bc = int(rng.integers(1, 20_000)), int(rng.integers(1, 257)), int(rng.integers(1, 257))
        call = Call("num_blocks", f"s={s}, Br={Br}, Bc={Bc}")
        got = _ints(sub.num_blocks(s, Br, Bc), 2, call)
        want = REFERENCES["num_blocks"](s, Br, Bc)
        if got != want:
            fail("wrong number of blocks", called=str(call), got=f"(Tr, Tc) = {got}", expected=f"(Tr, Tc) = {want}")
        call, shapes = _shapes(sub, s, d, Br, Bc)
        _compare_shapes(call, shapes, _expected_shapes(s, d, Br, Bc))
        call, traffic = _traffic(sub, s, d, Br, Bc)
        want = REFERENCES["hbm_elements"](s, d, Br, Bc)
        if {k: int(traffic[k]) for k in want} != want:
            fail("wrong traffic", called=str(call), got=show(traffic), expected=show(want))
