# drill: flashattention/triton-decode
# variant: base-2 exponentials with the scale folded into q, and a merge that walks the splits one by one
"""Split-KV decode in Triton: exp2 in the split kernel (log2(e)/sqrt(D) folded into q, the partial
logsumexp turned back to natural log on the way out) and a merge that keeps a running max over
the splits instead of loading them all at once."""

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
    seq_len = tl.load(SEQ_LENS + b)
    chunk = (seq_len + num_splits - 1) // num_splits
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float32) * (sm_scale * 1.4426950408889634)
    m2 = tl.full([], -float("inf"), dtype=tl.float32)  # running max, base-2 units
    l = tl.full([], 0.0, dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        live = rows < hi
        k = tl.load(K + b * stride_kb + kv * stride_kh + rows[:, None] * stride_ks + d[None, :],
                    mask=live[:, None], other=0.0).to(tl.float32)
        s2 = tl.where(live, tl.sum(k * q[None, :], 1), -float("inf"))
        m_new = tl.maximum(m2, tl.max(s2, 0))
        p = tl.exp2(s2 - m_new)
        scale = tl.exp2(m2 - m_new)
        v = tl.load(V + b * stride_vb + kv * stride_vh + rows[:, None] * stride_vs + d[None, :],
                    mask=live[:, None], other=0.0).to(tl.float32)
        acc = acc * scale + tl.sum(p[:, None] * v, 0)
        l = l * scale + tl.sum(p, 0)
        m2 = m_new

    empty = hi <= lo
    safe_l = tl.where(empty, 1.0, l)
    row = bh * num_splits + split
    tl.store(PART_O + row * D + d, tl.where(empty, 0.0, acc / safe_l))
    tl.store(PART_L + row, tl.where(empty, -float("inf"), (m2 + tl.log2(safe_l)) * 0.6931471805599453))


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    D: tl.constexpr, SPLITS: tl.constexpr,
):
    bh = tl.program_id(0)
    d = tl.arange(0, D)
    m = tl.full([], -float("inf"), dtype=tl.float32)
    total = tl.full([], 0.0, dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for s in range(0, num_splits):
        lse = tl.load(PART_L + bh * num_splits + s)
        if lse > -float("inf"):  # an empty split adds nothing
            part = tl.load(PART_O + (bh * num_splits + s) * D + d)
            m_new = tl.maximum(m, lse)
            shrink = tl.exp(m - m_new)
            w = tl.exp(lse - m_new)
            acc = acc * shrink + w * part
            total = total * shrink + w
            m = m_new
    b = bh // Hq
    h = bh % Hq
    tl.store(O + b * stride_ob + h * stride_oh + d, (acc / total).to(O.dtype.element_ty))


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    """Decode attention: q [B, Hq, D] over k_cache, v_cache [B, Hkv, S_max, D]; returns o [B, Hq, D]."""
    assert q.dim() == 3 and k_cache.dim() == 4 and k_cache.shape == v_cache.shape
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    assert k_cache.shape[0] == B and k_cache.shape[3] == D and Hq % Hkv == 0
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_cache, v_cache))
    seq_lens = seq_lens.to(device=q.device, dtype=torch.int32)
    if q.is_cuda:
        BLOCK_N, num_warps, num_stages = 64, 4, 3
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    else:  # the Triton interpreter
        BLOCK_N, num_warps, num_stages = 16, 4, 1
        sms = 4
    if num_splits is None:
        # Enough programs to give every SM a few, but no split shorter than one block.
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
        D=D, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages,
    )
    _decode_merge_kernel[(B * Hq,)](
        part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
        D=D, SPLITS=triton.next_power_of_2(num_splits), num_warps=4,
    )
    return o
