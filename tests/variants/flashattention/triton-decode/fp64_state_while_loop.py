# drill: flashattention/triton-decode
# variant: split kernel keeps m, l and acc in float64, walks its keys with a while loop, and writes an empty split's (0, -inf) in an explicit else branch; merge in float64 too
"""Split-KV decode in Triton with a float64 online softmax: more precision than the contract's
fp32 asks for (the partials are still stored as fp32). The key loop is a `while`, and a split
that starts past seq_len takes its own branch that writes O = 0 and L = -inf."""

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
    group = Hq // Hkv
    kv = h // group
    n = tl.load(SEQ_LENS + b)
    chunk = (n + num_splits - 1) // num_splits
    lo = split * chunk
    hi = tl.minimum(lo + chunk, n)
    d = tl.arange(0, D)
    out_row = bh * num_splits + split
    if lo < hi:
        q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float64)
        m = tl.full([], float("-inf"), tl.float64)
        l = tl.full([], 0.0, tl.float64)
        acc = tl.zeros([D], dtype=tl.float64)
        start = lo
        while start < hi:
            rows = start + tl.arange(0, BLOCK_N)
            live = rows < hi
            k = tl.load(K + b * stride_kb + kv * stride_kh + rows[:, None] * stride_ks + d[None, :],
                        mask=live[:, None], other=0.0).to(tl.float64)
            v = tl.load(V + b * stride_vb + kv * stride_vh + rows[:, None] * stride_vs + d[None, :],
                        mask=live[:, None], other=0.0).to(tl.float64)
            s = tl.where(live, tl.sum(k * q[None, :], 1) * sm_scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 0))
            scale = tl.exp(m - m_new)
            p = tl.exp(s - m_new)
            l = l * scale + tl.sum(p, 0)
            acc = acc * scale + tl.sum(p[:, None] * v, 0)
            m = m_new
            start += BLOCK_N
        tl.store(PART_O + out_row * D + d, (acc / l).to(tl.float32))
        tl.store(PART_L + out_row, (m + tl.log(l)).to(tl.float32))
    else:
        tl.store(PART_O + out_row * D + d, tl.zeros([D], dtype=tl.float32))
        tl.store(PART_L + out_row, float("-inf"))


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    D: tl.constexpr, SPLITS: tl.constexpr,
):
    bh = tl.program_id(0)
    sp = tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    ok = sp < num_splits
    L = tl.load(PART_L + bh * num_splits + sp, mask=ok, other=float("-inf")).to(tl.float64)
    parts = tl.load(PART_O + (bh * num_splits + sp)[:, None] * D + d[None, :], mask=ok[:, None], other=0.0)
    top = tl.max(L, 0)
    w = tl.exp(L - top)
    o = tl.sum(w[:, None] * parts.to(tl.float64), 0) / tl.sum(w, 0)
    tl.store(O + (bh // Hq) * stride_ob + (bh % Hq) * stride_oh + d, o.to(O.dtype.element_ty))


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    """Decode attention: q [B, Hq, D] over k_cache, v_cache [B, Hkv, S_max, D]; returns o [B, Hq, D]."""
    assert q.dim() == 3 and k_cache.dim() == 4 and k_cache.shape == v_cache.shape
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    assert k_cache.shape[0] == B and k_cache.shape[3] == D and Hq % Hkv == 0
    assert D in (16, 32, 64, 128)
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_cache, v_cache))
    seq_lens = seq_lens.to(device=q.device, dtype=torch.int32)
    BLOCK_N = 64 if q.is_cuda else 8
    if num_splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 2
        num_splits = max(1, min(triton.cdiv(2 * sms, B * Hq), triton.cdiv(S_max, BLOCK_N), 64))
    part_o = torch.empty((B * Hq, num_splits, D), dtype=torch.float32, device=q.device)
    part_l = torch.empty((B * Hq, num_splits), dtype=torch.float32, device=q.device)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    _decode_split_kernel[(num_splits, B * Hq)](
        q, k_cache, v_cache, seq_lens, part_o, part_l,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        Hq, Hkv, num_splits, 1.0 / math.sqrt(D),
        D=D, BLOCK_N=BLOCK_N, num_warps=4,
    )
    _decode_merge_kernel[(B * Hq,)](
        part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
        D=D, SPLITS=triton.next_power_of_2(num_splits), num_warps=4,
    )
    return o
