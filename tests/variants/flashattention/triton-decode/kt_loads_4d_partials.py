# drill: flashattention/triton-decode
# variant: K blocks loaded transposed as [D, BLOCK_N], partials allocated as [B, Hq, num_splits, D] and [B, Hq, num_splits] (same memory as the contract's), merge in base 2, default num_splits from S_max alone
"""Split-KV decode in Triton with the K block read through transposed pointers ([D, BLOCK_N],
scores tl.sum(kT * q[:, None], 0)), partial buffers shaped [B, Hq, num_splits, ...] (the same
row-major memory as [B·Hq, num_splits, ...]), and a merge that weights the splits with exp2 of
their logsumexps times log2(e). Without num_splits, one split per 32 slots of the cache."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(
    Q, K, V, SEQ_LENS, PART_O, PART_L,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    Hq, Hkv, num_splits, sm_scale,
    D: tl.constexpr, BLOCK_N: tl.constexpr,
):
    split = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    kv = h // (Hq // Hkv)
    seq_len = tl.load(SEQ_LENS + b)
    chunk = tl.cdiv(seq_len, num_splits)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)
    d = tl.arange(0, D)
    j = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float32)
    kT_base = K + b * stride_kb + kv * stride_kh + d[:, None]  # [D, 1]
    v_base = V + b * stride_vb + kv * stride_vh + d[None, :]  # [1, D]
    m = -float("inf")
    l = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        rows = start + j
        live = rows < hi
        kT = tl.load(kT_base + rows[None, :] * stride_ks, mask=live[None, :], other=0.0)  # [D, BLOCK_N]
        v = tl.load(v_base + rows[:, None] * stride_vs, mask=live[:, None], other=0.0)  # [BLOCK_N, D]
        s = tl.sum(kT.to(tl.float32) * q[:, None], 0) * sm_scale
        s = tl.where(live, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        r = tl.exp(m - m_new)
        l = l * r + tl.sum(p, 0)
        acc = acc * r + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m = m_new
    empty = lo >= hi
    l_safe = tl.where(empty, 1.0, l)
    tl.store(PART_O + (bh * num_splits + split) * D + d, tl.where(empty, 0.0, acc / l_safe))
    tl.store(PART_L + bh * num_splits + split, tl.where(empty, -float("inf"), m + tl.log(l_safe)))


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    D: tl.constexpr, SPLITS: tl.constexpr,
):
    LOG2E: tl.constexpr = 1.4426950408889634
    bh = tl.program_id(0)
    s = tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    have = s < num_splits
    L = tl.load(PART_L + bh * num_splits + s, mask=have, other=-float("inf")) * LOG2E
    parts = tl.load(PART_O + (bh * num_splits + s)[:, None] * D + d[None, :], mask=have[:, None], other=0.0)
    w = tl.exp2(L - tl.max(L, 0))
    w = w / tl.sum(w, 0)
    o = tl.sum(parts * w[:, None], 0)
    tl.store(O + (bh // Hq) * stride_ob + (bh % Hq) * stride_oh + d, o.to(O.dtype.element_ty))


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    """Decode attention: q [B, Hq, D] over k_cache, v_cache [B, Hkv, S_max, D]; returns o [B, Hq, D]."""
    assert q.dim() == 3 and k_cache.dim() == 4 and k_cache.shape == v_cache.shape
    B, Hq, D = q.shape
    _, Hkv, S_max, _ = k_cache.shape
    assert k_cache.shape[0] == B and k_cache.shape[3] == D and Hq % Hkv == 0
    assert D in (16, 32, 64, 128)
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k_cache.stride(-1) != 1:
        k_cache = k_cache.contiguous()
    if v_cache.stride(-1) != 1:
        v_cache = v_cache.contiguous()
    lens = seq_lens.to(q.device).to(torch.int32)
    BLOCK_N = 64 if q.is_cuda else 16
    if num_splits is None:
        num_splits = min(64, max(1, S_max // 32))
    part_o = torch.empty((B, Hq, num_splits, D), dtype=torch.float32, device=q.device)
    part_l = torch.empty((B, Hq, num_splits), dtype=torch.float32, device=q.device)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    _decode_split_kernel[(num_splits, B * Hq)](
        q, k_cache, v_cache, lens, part_o, part_l,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        Hq, Hkv, num_splits, D ** -0.5,
        D=D, BLOCK_N=BLOCK_N,
    )
    _decode_merge_kernel[(B * Hq,)](
        part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
        D=D, SPLITS=max(2, triton.next_power_of_2(num_splits)),
    )
    return o
