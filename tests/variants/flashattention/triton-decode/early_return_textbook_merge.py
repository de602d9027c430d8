# drill: flashattention/triton-decode
# variant: an empty split writes (0, -inf) and returns early; KV head as h·Hkv // Hq; merge computes the total logsumexp first, then weights e^(L_s - L) as the statement writes it; BLOCK_N = 32
"""Split-KV decode in Triton: the split kernel returns at once, after writing O = 0 and
L = -inf, when its start is past seq_len; the KV head is found as h·Hkv // Hq (the same as
h // (Hq / Hkv)); the merge follows the statement's formula literally, L = log Σ e^(L_s)
first and then o = Σ e^(L_s - L) O_s."""

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
    h = bh - b * Hq
    d = tl.arange(0, D)
    seq_len = tl.load(SEQ_LENS + b)
    chunk = tl.cdiv(seq_len, num_splits)
    lo = split * chunk
    if lo >= seq_len:
        tl.store(PART_O + (bh * num_splits + split) * D + d, tl.zeros([D], dtype=tl.float32))
        tl.store(PART_L + bh * num_splits + split, -float("inf"))
        return
    hi = tl.minimum(lo + chunk, seq_len)
    kv = h * Hkv // Hq
    q = tl.load(Q + b * stride_qb + h * stride_qh + d).to(tl.float32) * sm_scale
    m = tl.full([], -float("inf"), dtype=tl.float32)
    l = tl.full([], 0.0, dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        live = rows < hi
        k = tl.load(K + b * stride_kb + kv * stride_kh + rows[:, None] * stride_ks + d[None, :],
                    mask=live[:, None], other=0.0).to(tl.float32)
        s = tl.where(live, tl.sum(k * q[None, :], 1), -float("inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(V + b * stride_vb + kv * stride_vh + rows[:, None] * stride_vs + d[None, :],
                    mask=live[:, None], other=0.0).to(tl.float32)
        acc = alpha * acc + tl.sum(p[:, None] * v, 0)
        l = alpha * l + tl.sum(p, 0)
        m = m_new
    tl.store(PART_O + (bh * num_splits + split) * D + d, acc / l)
    tl.store(PART_L + bh * num_splits + split, m + tl.log(l))


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
    Ls = tl.load(PART_L + bh * num_splits + s, mask=have, other=-float("inf"))
    top = tl.max(Ls, 0)
    L = top + tl.log(tl.sum(tl.exp(Ls - top), 0))  # log Σ e^(L_s)
    parts = tl.load(PART_O + (bh * num_splits + s)[:, None] * D + d[None, :], mask=have[:, None], other=0.0)
    o = tl.sum(tl.exp(Ls - L)[:, None] * parts, 0)
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
    BLOCK_N = 64 if q.is_cuda else 32
    if num_splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
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
