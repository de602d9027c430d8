"""FlashAttention forward in FP8 (e4m3) with per-block scales: an inference option, forward only.

Hopper's tensor cores multiply e4m3 operands at twice the bf16 rate. FlashAttention-3 (Shah et
al. 2024, §3.3) runs attention in FP8 with two measures against its 3-bit mantissa:

- Block quantisation. Each block of BLOCK_M query rows, and each block of BLOCK_N key and value
  rows, gets its own scale (its largest |x| over 448, e4m3's largest finite value), so one outlier
  costs precision only in its block. The scales of Q and K fold into the softmax's scale factor;
  V's scale multiplies each block's P·V product before it joins the accumulator.
- Incoherent processing (optional). Q and K are multiplied by the same random orthogonal matrix M
  (a Hadamard matrix with random signs, over sqrt(D)); Q M (K M)ᵀ = Q Kᵀ, but an outlier channel
  is spread over every channel, so the block scales fit the values better.

P = exp2(S - m) lies in [0, 1]; it is quantised as 256·P (a power of two, so the scale is exact)
to keep small probabilities out of e4m3's subnormals, and the 256 is divided out with the row sum,
which is accumulated from the unquantised P in fp32. V is stored transposed ([B, H, D, S]),
so both matmuls read their reduction dimension contiguously, as Hopper's FP8 wgmma requires.

Shapes as flash_attention: q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with Hkv dividing H (GQA), any
lengths, causal aligned bottom-right. Returns o in q's dtype (and the natural-log lse). Plain
pointer arithmetic, so it runs under TRITON_INTERPRET=1; kernels/NOTES.md h10 has its accuracy
and speed.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .fastlaunch import interpreting
from .flash import check_arguments

E4M3_MAX = 448.0
P_SCALE = 256.0  # P in [0, 1] is quantised as P_SCALE·P: exact, and clear of e4m3's subnormals
LOG2E = 1.4426950408889634


def blocks(d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages); small blocks under the interpreter, for speed."""
    if interpreting():
        return 32, 32, 4, 1
    return 128, 128, 8, 3


def quantize(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, H, S, D] as e4m3 with one float32 scale per block of `block` rows: (x8, scale [B, H,
    ceil(S / block)]), x ≈ x8 · scale row-block by row-block."""
    B, H, S, D = x.shape
    n = -(-S // block)
    padded = torch.nn.functional.pad(x.float(), (0, 0, 0, n * block - S))
    amax = padded.view(B, H, n, block, D).abs().amax(dim=(-1, -2))
    scale = amax.clamp_min(1e-12) / E4M3_MAX  # an all-zero block keeps a finite scale
    x8 = (padded.view(B, H, n, block, D) / scale[..., None, None]).view(B, H, n * block, D)[:, :, :S]
    return x8.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


@functools.lru_cache(maxsize=None)
def _rotation(d: int, device: str) -> torch.Tensor:
    """A fixed random orthogonal [d, d] matrix: Sylvester's Hadamard matrix, columns signed at
    random (seed 0), over sqrt(d)."""
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    signs = torch.randint(0, 2, (d,), generator=torch.Generator().manual_seed(0)) * 2 - 1
    return (h * signs / math.sqrt(d)).to(device)


def incoherent(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q M and k M for the fixed rotation M (module docstring); their product q kᵀ is unchanged."""
    d = q.shape[-1]
    if d & (d - 1):
        raise ValueError(f"incoherent processing needs a power-of-two head dim, got {d}")
    m = _rotation(d, str(q.device))
    return q.float() @ m, k.float() @ m


@triton.jit
def _e4m3_rounded(x):
    """x rounded to e4m3's 3 mantissa bits (to nearest, ties to even) while still fp32, for the
    interpreter: its own fp32 -> e4m3 conversion drops the carry when rounding up crosses a power
    of two (125.6 becomes 64, not 128; Triton 3.9). Exact for e4m3's normal range, all that
    matters here (256·P below 2^-6 is P below 6e-5)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _fp8_fwd_kernel(Q, K, VT, QS, KS, VS, O, LSE,
                    sqb, sqh, sqs, skb, skh, sks, svb, svh, svd, sob, soh, sos,
                    H, G, SQ, SK, NQB, NKB, qk_scale,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                    P_SCALE: tl.constexpr, ROUND_FIRST: tl.constexpr):
    """One program per (query block, batch·head); VT is V transposed, [B, Hkv, D, Sk]."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    b = off_hz // H
    h = off_hz % H
    hk = h // G
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols0 = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + dims[None, :], mask=rows[:, None] < SQ, other=0.0)
    # S in base 2 = (q8 · k8ᵀ) · q_scale · k_scale · sm_scale · log2(e)
    q_scale = tl.load(QS + off_hz * NQB + start_m) * qk_scale
    kv_head = b * (H // G) + hk
    k_base = K + b * skb + hk * skh
    v_base = VT + b * svb + hk * svh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    shift = SK - SQ  # causal: query row r sees keys c <= r + shift
    hi = SK
    if CAUSAL:
        hi = tl.minimum(SK, tl.maximum((start_m + 1) * BLOCK_M + shift, 0))
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + cols0
        k = tl.load(k_base + cols[:, None] * sks + dims[None, :], mask=cols[:, None] < SK, other=0.0)
        s = tl.dot(q, tl.trans(k)) * (q_scale * tl.load(KS + kv_head * NKB + start_n // BLOCK_N))
        visible = cols[None, :] < SK
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + shift)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(v_base + dims[:, None] * svd + cols[None, :], mask=cols[None, :] < SK, other=0.0)
        p8 = p * P_SCALE
        if ROUND_FIRST:
            p8 = _e4m3_rounded(p8)
        pv = tl.dot(p8.to(tl.float8e4nv), tl.trans(vt))
        acc = acc * alpha[:, None] + pv * tl.load(VS + kv_head * NKB + start_n // BLOCK_N)
        m_i = m_new
    seen = l_i > 0
    o = acc / tl.where(seen, l_i * P_SCALE, 1.0)[:, None]
    tl.store(O + b * sob + h * soh + rows[:, None] * sos + dims[None, :], o.to(O.dtype.element_ty),
             mask=rows[:, None] < SQ)
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(LSE + off_hz * SQ + rows, lse, mask=rows < SQ)


class Quantized:
    """q, k and v in e4m3 with their block scales, v transposed: what the kernel reads. Built once
    per input by `prepare`, so a benchmark can time the kernel apart from the quantisation."""

    def __init__(self, q8, q_scale, k8, k_scale, vt8, v_scale, dtype, shape):
        self.q8, self.q_scale, self.k8, self.k_scale, self.vt8, self.v_scale = q8, q_scale, k8, k_scale, vt8, v_scale
        self.dtype, self.shape = dtype, shape


def prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rotate: bool = False) -> Quantized:
    """Quantise q, k (after the rotation, if asked) and v per block (module docstring)."""
    block_m, block_n, _, _ = blocks(q.shape[-1])
    if rotate:
        q, k = incoherent(q, k)
    q8, qs = quantize(q, block_m)
    k8, ks = quantize(k, block_n)
    v8, vs = quantize(v, block_n)
    return Quantized(q8, qs, k8, ks, v8.transpose(2, 3).contiguous(), vs, v.dtype, q.shape)


def forward(x: Quantized, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(o in the inputs' dtype, lse float32) from prepared inputs."""
    B, H, SQ, D = x.shape
    HKV, SK = x.k8.shape[1], x.k8.shape[2]
    block_m, block_n, warps, stages = blocks(D)
    o = torch.empty((B, H, SQ, D), dtype=x.dtype, device=x.q8.device)
    lse = torch.empty((B, H, SQ), dtype=torch.float32, device=x.q8.device)
    _fp8_fwd_kernel[(triton.cdiv(SQ, block_m), B * H)](
        x.q8, x.k8, x.vt8, x.q_scale, x.k_scale, x.v_scale, o, lse,
        *x.q8.stride()[:3], *x.k8.stride()[:3], *x.vt8.stride()[:3], *o.stride()[:3],
        H, H // HKV, SQ, SK, x.q_scale.shape[-1], x.k_scale.shape[-1], sm_scale * LOG2E,
        D=D, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal), P_SCALE=P_SCALE, ROUND_FIRST=interpreting(),
        num_warps=warps, num_stages=stages)
    return o, lse


def flash_attention_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None, incoherent: bool = False, return_lse: bool = False):
    """softmax(q kᵀ · sm_scale [+ bottom-right causal mask]) v with both matmuls in FP8 (e4m3),
    per-block scales, and optionally incoherent processing of q and k (module docstring).
    Forward only: nothing here is differentiable. Returns o in q's dtype, or (o, lse)."""
    sm_scale = check_arguments(q, k, v, sm_scale, "flash_attention_fp8")
    with torch.no_grad():
        o, lse = forward(prepare(q, k, v, rotate=incoherent), causal, sm_scale)
    return (o, lse) if return_lse else o
