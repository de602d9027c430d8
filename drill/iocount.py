"""HBM traffic and FLOPs of one attention head's forward pass: the one place they are counted.

Counts are in elements moved between HBM and the chip (multiply by the element size
for bytes). `drill show io`, the tiling picture and the deck's numeric cards use these,
and a measured-traffic report can compare against them.

  standard        4·s·d + 4·s²           Q, K, V read, O written; S and P each written and read
  flash           2·s·d + 2·Tr·s·d + s   FlashAttention-2 order (exercise 02): Q and O once,
                                         K and V once per Q block (Tr = ⌈s/Br⌉), L once
  flash from L2   4·s·d + s              the same kernel when K/V re-reads hit L2: HBM sees
                                         K and V about once per head
  FLOPs           4·s²·d                 QKᵀ and PV, 2·s²·d each (softmax not counted)
"""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kv_passes(s: int, br: int) -> int:
    """How many times the loop streams K and V: once per Q block."""
    return ceil_div(s, br)


def standard_elements(s: int, d: int) -> int:
    return 4 * s * d + 4 * s * s


def flash_elements(s: int, d: int, br: int) -> int:
    return 2 * s * d + 2 * kv_passes(s, br) * s * d + s


def flash_elements_l2(s: int, d: int) -> int:
    return 4 * s * d + s


def flops(s: int, d: int) -> int:
    return 4 * s * s * d


def intensity(flop_count: float, elements: float, dtype_bytes: int) -> float:
    """FLOPs per byte of HBM traffic."""
    return flop_count / (elements * dtype_bytes)
