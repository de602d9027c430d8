# drill: flashattention/triton-decode
# variant: 3-D split grid (split, head, batch) and 2-D merge grid (head, batch), the GQA group size passed as a constexpr, chunk by integer division, an empty split's (0, -inf) chosen with tl.where after the loop, default num_splits from S_max alone
"""Split-KV decode with the grid spelled out per axis: program ids give split, head and batch
directly, so no program divides b·Hq + h back into its parts."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(Q, K, V, SEQ_LENS, PART_O, PART_L,
                         stride_qb, stride_qh, stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
                         Hq, num_splits, sm_scale,
                         GROUP: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    split = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    kv_h = h // GROUP
    seq_len = tl.load(SEQ_LENS + b)
    chunk = (seq_len + num_splits - 1) // num_splits
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    dims = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + dims).to(tl.float32)
    k_head = K + b * stride_kb + kv_h * stride_kh
    v_head = V + b * stride_vb + kv_h * stride_vh
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        live = rows < hi
        k = tl.load(k_head + rows[:, None] * stride_ks + dims[None, :], mask=live[:, None], other=0.0)
        v = tl.load(v_head + rows[:, None] * stride_vs + dims[None, :], mask=live[:, None], other=0.0)
        s = tl.where(live, tl.sum(k.to(tl.float32) * q[None, :], 1) * sm_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m = m_new

    row = (b * Hq + h) * num_splits + split
    empty = hi <= lo
    safe_l = tl.where(empty, 1.0, l)
    tl.store(PART_O + row * D + dims, tl.where(empty, 0.0, acc / safe_l))
    tl.store(PART_L + row, tl.where(empty, float("-inf"), m + tl.log(safe_l)))


@triton.jit
def _decode_merge_kernel(PART_O, PART_L, O, stride_ob, stride_oh, Hq, num_splits,
                         D: tl.constexpr, SPLITS: tl.constexpr):
    h = tl.program_id(0)
    b = tl.program_id(1)
    base = (b * Hq + h) * num_splits
    splits = tl.arange(0, SPLITS)
    dims = tl.arange(0, D)
    there = splits < num_splits
    lse = tl.load(PART_L + base + splits, mask=there, other=float("-inf"))
    parts = tl.load(PART_O + (base + splits)[:, None] * D + dims[None, :], mask=there[:, None], other=0.0)
    top = tl.max(lse, 0)
    w = tl.where(lse == float("-inf"), 0.0, tl.exp(lse - top))
    o = tl.sum(w[:, None] * parts, 0) / tl.sum(w, 0)
    tl.store(O + b * stride_ob + h * stride_oh + dims, o.to(O.dtype.element_ty))


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    assert Hq % Hkv == 0 and D in (16, 32, 64, 128)
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_cache, v_cache))
    seq_lens = seq_lens.to(device=q.device, dtype=torch.int32)
    BLOCK_N = 64 if q.is_cuda else 16
    if num_splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        num_splits = max(1, min(triton.cdiv(2 * sms, B * Hq), triton.cdiv(S_max, BLOCK_N), 64))

    part_o = torch.empty((B * Hq, num_splits, D), dtype=torch.float32, device=q.device)
    part_l = torch.empty((B * Hq, num_splits), dtype=torch.float32, device=q.device)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    _decode_split_kernel[(num_splits, Hq, B)](
        q, k_cache, v_cache, seq_lens, part_o, part_l,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        Hq, num_splits, 1.0 / math.sqrt(D),
        GROUP=Hq // Hkv, D=D, BLOCK_N=BLOCK_N, num_warps=4)
    _decode_merge_kernel[(Hq, B)](part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
                                  D=D, SPLITS=triton.next_power_of_2(num_splits), num_warps=4)
    return o
