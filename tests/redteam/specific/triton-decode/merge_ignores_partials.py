# drill: flashattention/triton-decode
"""Attack: the split kernel is the reference's (right partials, right grid), but the merge kernel
never reads them. Launched over (B * Hq,) as asked, with q, K, V and seq_lens passed beside
PART_O and PART_L, each merge program walks all seq_len keys of its (b, h) again with one online
softmax and stores that as o: one program per head over the whole sequence, the very thing the
split exists to avoid, and no logsumexp merge at all.

Slipped past every check (under the interpreter the speed check, the one place a second full
read would show, is skipped): the values are full attention, check_kernels saw the split grid,
each split's own partials in PART_O / PART_L, and a launch over B * Hq after it. Now
_decode_probe.watched adds PARTIAL_SHIFT to every PART_O-sized argument of the split launch
just after it ran, and the checks take PARTIAL_SHIFT off the o that comes back: a merge of the
partials by their logsumexps moves by exactly that, a merge that ignores them is off by it
(every value check fails, diagnosed as "o did not come from the split kernel's partials").
"""

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
    kv = h // (Hq // Hkv)  # consecutive query heads share one KV head
    seq_len = tl.load(SEQ_LENS + b)
    # ceil(seq_len / num_splits) keys per split; splits past the end are empty (lo >= hi).
    chunk = tl.cdiv(seq_len, num_splits)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float32)  # [D]
    k_base = K + b * stride_kb + kv * stride_kh
    v_base = V + b * stride_vb + kv * stride_vh

    m = tl.full([], -float("inf"), dtype=tl.float32)  # running max of this split's scores
    l = tl.full([], 0.0, dtype=tl.float32)  # running sum of exp(score - m)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        live = rows < hi  # rows past seq_len may hold NaN: never load them
        k = tl.load(k_base + rows[:, None] * stride_ks + d[None, :], mask=live[:, None], other=0.0)
        v = tl.load(v_base + rows[:, None] * stride_vs + d[None, :], mask=live[:, None], other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], 1) * sm_scale  # [BLOCK_N]: one query row
        s = tl.where(live, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, 0))  # finite: every block holds a live key
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m = m_new

    # An empty split never entered the loop: O = 0, L = -inf, so it weighs 0 in the merge.
    out = tl.where(l > 0, acc / tl.where(l > 0, l, 1.0), 0.0)
    lse = tl.where(l > 0, m + tl.log(tl.where(l > 0, l, 1.0)), -float("inf"))
    row = bh * num_splits + split
    tl.store(PART_O + row * D + d, out)
    tl.store(PART_L + row, lse)


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    Q, K, V, SEQ_LENS, stride_qb, stride_qh, stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs, Hkv, sm_scale,
    D: tl.constexpr, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Ignores PART_O / PART_L: one program per (b, h) walks the whole sequence again.
    bh = tl.program_id(0)
    b = bh // Hq
    h = bh % Hq
    kv = h // (Hq // Hkv)
    seq_len = tl.load(SEQ_LENS + b)
    d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float32)
    k_base = K + b * stride_kb + kv * stride_kh
    v_base = V + b * stride_vb + kv * stride_vh
    m = tl.full([], -float("inf"), dtype=tl.float32)
    l = tl.full([], 0.0, dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        live = rows < seq_len
        k = tl.load(k_base + rows[:, None] * stride_ks + d[None, :], mask=live[:, None], other=0.0)
        v = tl.load(v_base + rows[:, None] * stride_vs + d[None, :], mask=live[:, None], other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], 1) * sm_scale
        s = tl.where(live, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m = m_new
    o = acc / l
    tl.store(O + b * stride_ob + h * stride_oh + d, o.to(O.dtype.element_ty))


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
        q, k_cache, v_cache, seq_lens, q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), Hkv, 1.0 / math.sqrt(D),
        D=D, SPLITS=triton.next_power_of_2(num_splits), BLOCK_N=BLOCK_N, num_warps=4,
    )
    return o
