# drill: flashattention/triton-decode
"""Attack: q, the caches and seq_lens are copied out with torch.from_numpy(a).copy_(t); every
split's normalised partial and logsumexp are computed in NumPy and copied back with copy_; the
"split kernel" over (num_splits, B*Hq) only copies them into PART_O and PART_L, and an honest merge
kernel combines them (so the shifted-partials check passes too).
Slipped past: copy_ into NumPy's memory was not a host read to the probe, from_numpy not seen.
Now caught: torch calls or launches touching memory torch cannot resize (NumPy's) are flagged."""
import math

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(SRC_O, SRC_L, PART_O, PART_L, num_splits, D: tl.constexpr):
    # Copies partials computed on the host: no score is computed here.
    split = tl.program_id(0)
    row = tl.program_id(1) * num_splits + split
    d = tl.arange(0, D)
    tl.store(PART_O + row * D + d, tl.load(SRC_O + row * D + d))
    tl.store(PART_L + row, tl.load(SRC_L + row))


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    D: tl.constexpr, SPLITS: tl.constexpr,
):
    bh = tl.program_id(0)
    s = tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    have = s < num_splits
    lse = tl.load(PART_L + bh * num_splits + s, mask=have, other=-float("inf"))
    parts = tl.load(PART_O + (bh * num_splits + s)[:, None] * D + d[None, :], mask=have[:, None], other=0.0)
    top = tl.max(lse, 0)
    total = top + tl.log(tl.sum(tl.exp(lse - top), 0))  # the full logsumexp, as exercise 04 writes it
    o = tl.sum(tl.exp(lse - total)[:, None] * parts, 0)
    tl.store(O + (bh // Hq) * stride_ob + (bh % Hq) * stride_oh + d, o.to(O.dtype.element_ty))



def _host(t, dtype):
    """t's values in a NumPy array, through copy_ into a tensor that shares the array's memory."""
    a = np.empty(tuple(t.shape), dtype=dtype)
    torch.from_numpy(a).copy_(t)
    return a


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    if num_splits is None:
        num_splits = max(1, min(triton.cdiv(8, B * Hq), triton.cdiv(S_max, 16), 64))
    Q, K, V = (_host(t, np.float32).astype(np.float64) for t in (q, k_cache, v_cache))
    lens = _host(seq_lens, np.int32)
    po = np.zeros((B * Hq, num_splits, D), np.float32)
    pl = np.full((B * Hq, num_splits), -np.inf, np.float32)
    group = Hq // Hkv
    for b in range(B):
        n = int(lens[b])
        chunk = -(-n // num_splits)
        for h in range(Hq):
            s_all = K[b, h // group, :n] @ Q[b, h] / math.sqrt(D)
            for sp in range(num_splits):
                lo, hi = min(sp * chunk, n), min(sp * chunk + chunk, n)
                if hi <= lo:
                    continue
                s = s_all[lo:hi]
                m = s.max()
                p = np.exp(s - m)
                po[b * Hq + h, sp] = p @ V[b, h // group, lo:hi] / p.sum()
                pl[b * Hq + h, sp] = m + np.log(p.sum())
    src_o = torch.empty(po.shape, dtype=torch.float32, device=q.device)
    src_o.copy_(torch.from_numpy(po))
    src_l = torch.empty(pl.shape, dtype=torch.float32, device=q.device)
    src_l.copy_(torch.from_numpy(pl))
    part_o = torch.empty_like(src_o)
    part_l = torch.empty_like(src_l)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    _decode_split_kernel[(num_splits, B * Hq)](src_o, src_l, part_o, part_l, num_splits, D=D)
    _decode_merge_kernel[(B * Hq,)](part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
                                    D=D, SPLITS=triton.next_power_of_2(num_splits))
    return o
