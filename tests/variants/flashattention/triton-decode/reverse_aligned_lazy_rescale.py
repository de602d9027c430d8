# drill: flashattention/triton-decode
# variant: BLOCK_N-aligned key blocks walked from the split's last block to its first (loads masked lo <= row < hi), lazy rescaling (the max moves only when it grows by more than 8), q prescaled, merge with weights normalised before the sum
"""Split-KV decode in Triton: key blocks aligned on multiples of BLOCK_N, in reverse order,
and the running max kept stale until a score exceeds it by more than TAU (p <= e^TAU stays
safe in fp32; the final O = acc / l and L = m + log l use the same m, so the result is exact)."""

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
    D: tl.constexpr, BLOCK_N: tl.constexpr, TAU: tl.constexpr = 8.0,
):
    split = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh - b * Hq
    kv = h // (Hq // Hkv)
    seq_len = tl.load(SEQ_LENS + b)
    chunk = tl.cdiv(seq_len, num_splits)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float32) * sm_scale
    k_base = K + b * stride_kb + kv * stride_kh
    v_base = V + b * stride_vb + kv * stride_vh
    first = lo // BLOCK_N  # blocks aligned on multiples of BLOCK_N that meet [lo, hi)
    last = (hi - 1) // BLOCK_N
    count = tl.where(hi > lo, last - first + 1, 0)

    m = tl.full([], -float("inf"), dtype=tl.float32)
    l = tl.full([], 0.0, dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for t in range(0, count):
        start = (last - t) * BLOCK_N  # from the split's last block back to its first
        rows = start + tl.arange(0, BLOCK_N)
        live = (rows >= lo) & (rows < hi)  # rows before lo belong to the previous split
        k = tl.load(k_base + rows[:, None] * stride_ks + d[None, :], mask=live[:, None], other=0.0)
        v = tl.load(v_base + rows[:, None] * stride_vs + d[None, :], mask=live[:, None], other=0.0)
        s = tl.where(live, tl.sum(k.to(tl.float32) * q[None, :], 1), -float("inf"))
        top = tl.max(s, 0)
        m_new = tl.where(top > m + TAU, top, m)  # move the max only when it has grown a lot
        alpha = tl.exp(m - m_new)  # 1 when m stays, 0 on the first block (m = -inf)
        p = tl.exp(s - m_new)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        l = l * alpha + tl.sum(p, 0)
        m = m_new

    row = bh * num_splits + split
    if count > 0:
        tl.store(PART_O + row * D + d, acc / l)
        tl.store(PART_L + row, m + tl.log(l))
    else:  # a split past the end of the sequence
        tl.store(PART_O + row * D + d, tl.zeros([D], dtype=tl.float32))
        tl.store(PART_L + row, -float("inf"))


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
    top = tl.max(lse, 0)
    w = tl.where(lse > -float("inf"), tl.exp(lse - top), 0.0)
    w = w / tl.sum(w, 0)  # normalised weights first
    parts = tl.load(PART_O + (bh * num_splits + s)[:, None] * D + d[None, :], mask=have[:, None], other=0.0)
    o = tl.sum(parts * w[:, None], 0)
    tl.store(O + (bh // Hq) * stride_ob + (bh % Hq) * stride_oh + d, o.to(O.dtype.element_ty))


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
        BLOCK_N, num_warps, num_stages = 128, 8, 2
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    else:  # the Triton interpreter
        BLOCK_N, num_warps, num_stages = 32, 4, 1
        sms = 4
    if num_splits is None:
        num_splits = max(1, min(triton.cdiv(2 * sms, B * Hq), triton.cdiv(S_max, BLOCK_N), 128))

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
