# drill: flashattention/triton-forward
# variant: launcher flattens q, k, v to [B·H, S, D] with reshape (a copy when the strides do not allow a view), the kernel sees one stride per axis, writes an fp32 o that the launcher casts back with .to and views as [B, H, S, D]; the causal mask is built from an offset difference; square 16×16 interpreter blocks
"""A forward kernel that knows nothing of batches: the launcher folds B and H into one axis.

With [B·H, S, D] tensors a program needs one head stride per tensor. The kernel accumulates and
stores o in fp32; the launcher casts it to the inputs' dtype at the end.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd(Q, K, V, O, s_qh, s_qs, s_kh, s_ks, s_vh, s_vs, S, sm_scale,
         D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
    head = tl.program_id(1)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    d = tl.arange(0, D)
    q = tl.load(Q + head * s_qh + rows[:, None] * s_qs + d[None, :], mask=rows[:, None] < S, other=0.0)
    m = tl.full([BM], float("-inf"), tl.float32)
    l = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    stop = tl.minimum(S, (tl.program_id(0) + 1) * BM) if CAUSAL else S
    for n0 in range(0, stop, BN):
        cols = n0 + tl.arange(0, BN)
        k = tl.load(K + head * s_kh + cols[:, None] * s_ks + d[None, :], mask=cols[:, None] < S, other=0.0)
        v = tl.load(V + head * s_vh + cols[:, None] * s_vs + d[None, :], mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        hidden = cols[None, :] >= S
        if CAUSAL:
            hidden = hidden | ((cols[None, :] - rows[:, None]) > 0)
        s = tl.where(hidden, float("-inf"), s)
        m_new = tl.maximum(m, tl.max(s, axis=1))
        scale_old = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * scale_old + tl.sum(p, axis=1)
        acc = acc * scale_old[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O + head * S * D + rows[:, None] * D + d[None, :], acc / l[:, None], mask=rows[:, None] < S)


def flash_attention(q, k, v, causal=False, sm_scale=None):
    B, H, S, D = q.shape
    assert k.shape == v.shape == q.shape and D in (16, 32, 64, 128)
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    # reshape is a view when it can be, a copy otherwise; the kernel also wants D's stride to be 1.
    q3, k3, v3 = (t.reshape(B * H, S, D) for t in (q, k, v))
    q3, k3, v3 = (t if t.stride(-1) == 1 else t.contiguous() for t in (q3, k3, v3))
    out = torch.empty((B * H, S, D), dtype=torch.float32, device=q.device)
    BM, BN = (64, 64) if q.is_cuda else (16, 16)
    _fwd[(triton.cdiv(S, BM), B * H)](
        q3, k3, v3, out, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
        S, float(scale), D=D, BM=BM, BN=BN, CAUSAL=bool(causal), num_warps=4)
    return out.to(q.dtype).view(B, H, S, D)
