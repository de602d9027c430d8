# drill: flashattention/triton-decode
"""Attack: no torch call touches NumPy's memory. A gather kernel of the file's own copies q, the
caches and seq_lens into tensors that share NumPy arrays' memory; every split's partial is made in
NumPy, and the "split kernel" reads them straight from NumPy-backed tensors passed as its
arguments, then an honest merge combines them.
Caught by the same rule as numpy_memory_partials.py: from_numpy itself (seen as the lift_fresh
it makes) and every torch call on the arrays' memory count as torch computing in the file; on a GPU
a kernel cannot take host memory at all."""
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



@triton.jit
def _gather_kernel(SRC, DST, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(DST + i, tl.load(SRC + i, mask=i < N), mask=i < N)


def _host(t, dtype):
    """t's values in a NumPy array, written there by a kernel launched on the array's memory."""
    flat = t.contiguous().reshape(-1)
    if flat.is_floating_point():
        flat = flat.float()
    a = np.empty(flat.numel(), dtype=dtype)
    _gather_kernel[(triton.cdiv(flat.numel(), 1024),)](flat, torch.from_numpy(a), flat.numel(), BLOCK=1024)
    return a.reshape(tuple(t.shape))



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
    src_o, src_l = torch.from_numpy(po), torch.from_numpy(pl)  # read by the split kernel as they are
    part_o = torch.empty_like(src_o)
    part_l = torch.empty_like(src_l)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    _decode_split_kernel[(num_splits, B * Hq)](src_o, src_l, part_o, part_l, num_splits, D=D)
    _decode_merge_kernel[(B * Hq,)](part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
                                    D=D, SPLITS=triton.next_power_of_2(num_splits))
    return o
