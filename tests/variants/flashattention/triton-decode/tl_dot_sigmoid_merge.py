# drill: flashattention/triton-decode
# variant: scores and P·V through tl.dot on a query broadcast to 16 columns (same-dtype operands, fp32 accumulation, P cast to V's dtype), the merge folds normalised (O, L) pairs split by split with sigmoid weights
"""Split-KV decode in Triton with the two products on the matrix units.

One query row is too thin for tl.dot, so it is broadcast to a [D, 16] matrix: every column of
K · Qmat is the score vector, and every row of Pmat · V is the weighted sum of V. The merge
walks the splits, keeping the merged output already normalised together with its logsumexp:
adding a split with logsumexp L_s moves o towards O_s by sigmoid(L_s - L)."""

import math

import torch
import triton
import triton.language as tl

WIDE = 16  # the smallest width tl.dot takes


@triton.jit
def _decode_split_kernel(
    Q, K, V, SEQ_LENS, PART_O, PART_L,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    Hq, Hkv, num_splits, sm_scale,
    D: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr = False,
):
    split = tl.program_id(0)
    bh = tl.program_id(1)
    h = bh % Hq
    b = bh // Hq
    kv = h // (Hq // Hkv)
    seq_len = tl.load(SEQ_LENS + b)
    chunk = tl.cdiv(seq_len, num_splits)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d)  # in the cache's dtype, like K
    qmat = tl.broadcast_to(q[:, None], (D, 16))  # [D, 16], every column the query
    k_ptrs = K + b * stride_kb + kv * stride_kh + d[None, :]
    v_ptrs = V + b * stride_vb + kv * stride_vh + d[None, :]

    m = tl.full([], -float("inf"), dtype=tl.float32)
    l = tl.full([], 0.0, dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        live = rows < hi
        k = tl.load(k_ptrs + rows[:, None] * stride_ks, mask=live[:, None], other=0.0)
        if IEEE:
            s_all = tl.dot(k, qmat, input_precision="ieee")
        else:
            s_all = tl.dot(k, qmat)  # [BLOCK_N, 16] fp32, identical columns
        s = tl.max(s_all, 1) * sm_scale
        s = tl.where(live, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)  # [BLOCK_N], 0 on dead rows
        v = tl.load(v_ptrs + rows[:, None] * stride_vs, mask=live[:, None], other=0.0)
        pmat = tl.broadcast_to(p[None, :], (16, BLOCK_N)).to(v.dtype)
        if IEEE:
            pv_all = tl.dot(pmat, v, input_precision="ieee")
        else:
            pv_all = tl.dot(pmat, v)  # [16, D] fp32, identical rows
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.max(pv_all, 0)
        m = m_new

    row = bh * num_splits + split
    full = l > 0
    safe = tl.where(full, l, 1.0)
    tl.store(PART_O + row * D + d, tl.where(full, acc / safe, 0.0))
    tl.store(PART_L + row, tl.where(full, m + tl.log(safe), -float("inf")))


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    D: tl.constexpr, SPLITS: tl.constexpr,
):
    bh = tl.program_id(0)
    d = tl.arange(0, D)
    base = bh * num_splits
    # Split 0 always holds a key (seq_len >= 1): start the merge from it.
    L = tl.load(PART_L + base)
    o = tl.load(PART_O + base * D + d)
    for s in range(1, num_splits):
        Ls = tl.load(PART_L + base + s)
        Os = tl.load(PART_O + (base + s) * D + d)
        # share of the new split: e^Ls / (e^L + e^Ls); an empty split (Ls = -inf) gets 0
        w = 1.0 / (1.0 + tl.exp(L - Ls))
        o = o + (Os - o) * w
        L = tl.maximum(L, Ls) + tl.log(1.0 + tl.exp(-tl.abs(L - Ls)))
    tl.store(O + (bh // Hq) * stride_ob + (bh % Hq) * stride_oh + d, o.to(O.dtype.element_ty))


def flash_decode(q, k_cache, v_cache, seq_lens, num_splits=None):
    """Decode attention: q [B, Hq, D] over k_cache, v_cache [B, Hkv, S_max, D]; returns o [B, Hq, D]."""
    assert q.dim() == 3 and k_cache.dim() == 4 and k_cache.shape == v_cache.shape
    B, Hq, D = q.shape
    Hkv, S_max = k_cache.shape[1], k_cache.shape[2]
    assert k_cache.shape[0] == B and k_cache.shape[3] == D and Hq % Hkv == 0
    assert D in (16, 32, 64, 128), "head dim must be 16, 32, 64 or 128"
    q, k_cache, v_cache = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_cache, v_cache))
    q = q.to(k_cache.dtype)  # tl.dot wants both operands in one dtype
    seq_lens = seq_lens.to(device=q.device, dtype=torch.int32)
    if q.is_cuda:
        BLOCK_N, num_warps, num_stages = 64, 4, 2
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    else:  # the Triton interpreter
        BLOCK_N, num_warps, num_stages = 16, 4, 1
        sms = 4
    if num_splits is None:
        num_splits = max(1, min(triton.cdiv(4 * sms, B * Hq), triton.cdiv(S_max, 2 * BLOCK_N), 64))

    part_o = torch.empty((B * Hq, num_splits, D), dtype=torch.float32, device=q.device)
    part_l = torch.empty((B * Hq, num_splits), dtype=torch.float32, device=q.device)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    _decode_split_kernel[(num_splits, B * Hq)](
        q, k_cache, v_cache, seq_lens, part_o, part_l,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        Hq, Hkv, num_splits, 1.0 / math.sqrt(D),
        D=D, BLOCK_N=BLOCK_N, IEEE=q.dtype == torch.float32, num_warps=num_warps, num_stages=num_stages,
    )
    _decode_merge_kernel[(B * Hq,)](
        part_o, part_l, o, o.stride(0), o.stride(1), Hq, num_splits,
        D=D, SPLITS=triton.next_power_of_2(num_splits), num_warps=1,
    )
    return o
