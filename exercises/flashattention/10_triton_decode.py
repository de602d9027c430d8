# drill: flashattention/triton-decode
"""Split-KV decode attention (FlashDecoding) in Triton, with GQA.

    q                 [B, Hq, D]          one new token per sequence
    k_cache, v_cache  [B, Hkv, S_max, D]  the KV cache; rows past seq_lens[b] may hold anything (NaN too)
    seq_lens          int32 [B]           1 <= seq_lens[b] <= S_max
    o                 [B, Hq, D]          o[b, h] = softmax(q[b, h] · K_bᵀ / √D) · V_b over the first
                                          seq_lens[b] keys of KV head h // (Hq // Hkv)

One query row per head leaves nothing to tile on the query side, so split the keys (the
NumPy version is exercise 08). Two kernels, both launched for you by flash_decode below:

  _decode_split_kernel, grid (num_splits, B * Hq): program (split, b * Hq + h) handles keys
      [split * chunk, min((split + 1) * chunk, seq_len)) with chunk = ceil(seq_len / num_splits),
      runs the online softmax over them in blocks of BLOCK_N (fp32 m, l, acc) and writes
          PART_O[b * Hq + h, split, :]  this split's normalised output      (fp32, [D])
          PART_L[b * Hq + h, split]     this split's natural-log logsumexp  (fp32)
      A split with no key (its start is past seq_len) writes O = 0 and L = -inf.
  _decode_merge_kernel, grid (B * Hq,): merges the num_splits partials of one (b, h) by
      their logsumexp (exercise 04): o = Σ_s e^(L_s - L) · O_s with L = log Σ_s e^(L_s).

Rows past seq_len must never be loaded (mask them; the checks fill them with NaN, or with
large finite values): seq_lens alone says which rows are live.
The launcher only allocates, takes views and casts, and launches: drill counts any other torch
operation in your file as computing beside the kernels, reading seq_lens on the host included
(int(seq_lens.max()) to size num_splits fails; size it from S_max, as below).
With one query row, the scores are a [BLOCK_N] vector: tl.sum(k * q[None, :], 1) does it
without tl.dot.

Without a GPU, drill runs your kernels under the Triton interpreter (TRITON_INTERPRET=1) on
small fp32 shapes: correctness only. On a GPU it also checks fp16 and bf16 and measures
GB/s of K and V read against drill's reference decode kernel.
Triton reminders: tl.arange(0, N) needs a power of two; tl.load(ptrs, mask=..., other=0.0);
tl.max(x, 0), tl.sum(x, 0); tl.where(cond, x, y); tl.exp, tl.log; tl.cdiv; tl.minimum.

Check your work:  drill check 10_triton_decode.py
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
    # TODO: which work is mine? split = tl.program_id(0); tl.program_id(1) = b * Hq + h.
    # TODO: the KV head this query head reads (GQA): h // (Hq // Hkv).
    # TODO: this split's keys: seq_len = tl.load(SEQ_LENS + b), chunk = tl.cdiv(seq_len, num_splits),
    #       lo = split * chunk, hi = min(lo + chunk, seq_len).
    # TODO: load q[b, h] ([D]) and set m = -inf, l = 0 (tl.full([], ..., tl.float32)), acc = 0 ([D], fp32).
    # TODO: for start in range(lo, hi, BLOCK_N): load K and V rows [BLOCK_N, D] with a mask
    #       rows < hi (never past seq_len), scores s = (k · q) · sm_scale with dead rows -inf,
    #       then the online-softmax update of m, l and acc.
    # TODO: write this split's O = acc / l and L = m + log(l) to PART_O and PART_L at row
    #       (b * Hq + h) * num_splits + split; an empty split writes O = 0 and L = -inf.
    pass


@triton.jit
def _decode_merge_kernel(
    PART_O, PART_L, O,
    stride_ob, stride_oh,
    Hq, num_splits,
    D: tl.constexpr, SPLITS: tl.constexpr,
):
    # TODO: which (b, h)? tl.program_id(0) = b * Hq + h.
    # TODO: load the num_splits logsumexps ([SPLITS], masked with -inf) and partial outputs
    #       ([SPLITS, D], masked with 0).
    # TODO: weights w = exp(L_s - max L) (empty splits weigh 0); o = Σ w·O_s / Σ w.
    # TODO: store o in O's dtype at O + b * stride_ob + h * stride_oh.
    pass


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
    # TODO: remove this line once both kernels are written.
    raise NotImplementedError("write the bodies of _decode_split_kernel and _decode_merge_kernel")
    return o
