"""FlashAttention forward in FP8 (e4m3) with per-block scales: an inference option, forward only.

Hopper's tensor cores multiply e4m3 operands at twice the bf16 rate. FlashAttention-3 (Shah et
al. 2024, §3.3) runs attention in FP8 with two measures against its 3-bit mantissa:

- Block quantisation. Each block of query rows, and each block of BLOCK_N key and value rows,
  gets its own scale (its largest |x| over 448, e4m3's largest finite value), so one outlier
  costs precision only in its block. The scales of Q and K fold into the softmax's scale factor.
  V's block scale folds into P: block j's P is quantised as 256·P·r_j, r_j = scale_j / (the
  head's largest V scale) ≤ 1, so every block's P·V adds straight into one accumulator, which
  is multiplied back once at the end. A block of small values gets a P with fewer bits, but its
  share of the output is small by the same factor.
- Incoherent processing (optional). Q and K are multiplied by the same random orthogonal matrix M
  (a Hadamard matrix with random signs, over sqrt(D)); Q M (K M)ᵀ = Q Kᵀ, but an outlier channel
  is spread over every channel, so the block scales fit the values better.

P = exp2(S - m) lies in [0, 1]; the 256 in 256·P (a power of two, so exact) keeps small
probabilities out of e4m3's subnormals. The factor 256·r_j goes into the exponent (exp2(S − m +
log2(256·r_j))), so it costs nothing per score; the row sum is accumulated without it in fp32.
V is stored transposed ([B, H, D, S]), so both matmuls read their reduction dimension
contiguously, as Hopper's FP8 wgmma requires. One Triton kernel (`quantize`) reads each input
once and writes its e4m3 copy and block scales.

Two kernels run it, as dispatch.fp8_plan chooses. On Hopper, for the shapes gluon_fwd.py covers
(Sq and Sk multiples of 128, causal only with Sq = Sk, bf16 or fp16 in), its warp-specialised
Gluon forward with FP8=True (a TMA producer warp, asynchronous e4m3 wgmma, P rounded to e4m3 in
registers). Everywhere else, including the interpreter, the plain Triton kernel below. This file
quantises for either (prepare) and runs its own (forward).

Shapes as flash_attention: q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with Hkv dividing H (GQA), any
lengths, causal aligned bottom-right. Returns o in q's dtype (and the natural-log lse). The Triton
kernel is plain pointer arithmetic, so it runs under TRITON_INTERPRET=1; kernels/NOTES.md has
the accuracy and speed.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .common import LOG2E
from .fastlaunch import interpreting

E4M3_MAX = 448.0
P_SCALE = 256.0  # P in [0, 1] is quantised as P_SCALE·P: exact, and clear of e4m3's subnormals


def blocks(d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages); small blocks under the interpreter, for speed."""
    if interpreting():
        return 32, 32, 4, 1
    return 128, 128, 8, 3


def quantize_reference(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, H, S, D] as e4m3 with one float32 scale per block of `block` rows: (x8, scale [B, H,
    ceil(S / block)]), x ≈ x8 · scale row-block by row-block. In torch: what `quantize` computes
    in one pass, and the tests' reference."""
    B, H, S, D = x.shape
    n = -(-S // block)
    padded = torch.nn.functional.pad(x.float(), (0, 0, 0, n * block - S))
    amax = padded.view(B, H, n, block, D).abs().amax(dim=(-1, -2))
    scale = amax.clamp_min(1e-12) / E4M3_MAX  # an all-zero block keeps a finite scale
    x8 = (padded.view(B, H, n, block, D) / scale[..., None, None]).view(B, H, n * block, D)[:, :, :S]
    return x8.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


@triton.jit
def _quantize_kernel(X, Y, SCALE, sxb, sxh, sxs, syb, syr, syd, H, S, NB,
                     BLOCK: tl.constexpr, D: tl.constexpr, TOP: tl.constexpr, ROUND_FIRST: tl.constexpr,
                     WGMMA_ORDER: tl.constexpr):
    """One block of BLOCK rows of one head: its scale (largest |x| / TOP) and its e4m3 values,
    stored at Y + row·syr + column·syd (syd ≠ 1: transposed), rows placed for gluon_fwd if asked."""
    blk = tl.program_id(0)
    off_hz = tl.program_id(1)
    rows = blk * BLOCK + tl.arange(0, BLOCK)
    dims = tl.arange(0, D)
    inside = rows[:, None] < S
    x = tl.load(X + off_hz // H * sxb + off_hz % H * sxh + rows[:, None] * sxs + dims[None, :], mask=inside,
                other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.max(tl.abs(x), 1), 0), 1e-12) / TOP  # an all-zero block stays finite
    y = x / scale
    if ROUND_FIRST:
        y = _e4m3_rounded(y)
    if WGMMA_ORDER:
        rows = _wgmma_key_position(rows)
    tl.store(Y + off_hz * syb + rows[:, None] * syr + dims[None, :] * syd, y.to(tl.float8e4nv), mask=inside)
    tl.store(SCALE + off_hz * NB + blk, scale)


@triton.jit
def _wgmma_key_position(r):
    """Where row r goes among the keys of its 32 for gluon_fwd's FP8 P·V: bits b q1 q0 of r (8, 4,
    2) become q1 q0 b, the order in which P's columns reach the e4m3 wgmma without moving between
    threads (gluon_fwd._operand)."""
    return (r & ~15) | ((r & 6) << 1) | ((r >> 2) & 2) | (r & 1)


def quantize(x: torch.Tensor, block: int, transpose: bool = False,
             wgmma_order: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """As quantize_reference, in one read of x (any strides with a unit last one) and one write;
    transpose: the e4m3 copy laid out [B, H, D, S] (returned as that tensor); wgmma_order: rows
    placed as gluon_fwd's FP8 kernel reads V (_wgmma_key_position; S a multiple of 32)."""
    B, H, S, D = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    n = -(-S // block)
    y = torch.empty((B, H, D, S) if transpose else (B, H, S, D), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((B, H, n), dtype=torch.float32, device=x.device)
    row_stride, col_stride = (1, S) if transpose else (D, 1)
    _quantize_kernel[(n, B * H)](x, y, scale, *x.stride()[:3], S * D, row_stride, col_stride, H, S, n,
                                 BLOCK=block, D=D, TOP=E4M3_MAX, ROUND_FIRST=interpreting(), WGMMA_ORDER=wgmma_order,
                                 num_warps=8 if block * D >= 8192 else 4)
    return y, scale


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
    """x rounded to e4m3 (to nearest, ties to even) while still fp32, for the interpreter: its own
    fp32 -> e4m3 conversion drops the carry when rounding up crosses a power of two (125.6 becomes
    64, not 128; Triton 3.9). Normal values keep 3 mantissa bits; below 2^-6, e4m3's subnormals,
    the step is 2^-9, which adding and taking away 1.5·2^14 rounds to (fp32's step there)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000
    return tl.where(tl.abs(x) < 0.015625, (x + 24576.0) - 24576.0, bits.to(tl.float32, bitcast=True))


@triton.jit
def _fp8_fwd_kernel(Q, K, VT, QS, KS, VC, VOUT, O, LSE,
                    sqb, sqh, sqs, skb, skh, sks, svb, svh, svd, sob, soh, sos,
                    H, G, SQ, SK, NQB, NKB, qk_scale,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                    ROUND_FIRST: tl.constexpr):
    """One program per (query block, batch·head); VT is V transposed, [B, Hkv, D, Sk]; QS one
    scale per BLOCK_M query rows, KS and VC (log2 of P's factor) per key block, VOUT per head."""
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
        vc = tl.load(VC + kv_head * NKB + start_n // BLOCK_N)
        p8 = tl.math.exp2(s - (m_ref - vc)[:, None])  # P times 2^vc: V's block scale folded in
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p8, 1) * tl.math.exp2(-vc)
        vt = tl.load(v_base + dims[:, None] * svd + cols[None, :], mask=cols[None, :] < SK, other=0.0)
        if ROUND_FIRST:
            p8 = _e4m3_rounded(p8)
        acc = tl.dot(p8.to(tl.float8e4nv), tl.trans(vt), acc * alpha[:, None])
        m_i = m_new
    seen = l_i > 0
    o = acc * tl.load(VOUT + kv_head) / tl.where(seen, l_i, 1.0)[:, None]
    tl.store(O + b * sob + h * soh + rows[:, None] * sos + dims[None, :], o.to(O.dtype.element_ty),
             mask=rows[:, None] < SQ)
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(LSE + off_hz * SQ + rows, lse, mask=rows < SQ)


class Quantized:
    """q, k and v in e4m3 with their scales, v transposed (for a Gluon config, its keys
    placed by _wgmma_key_position), for one kernel (cfg: its Gluon config,
    None for the Triton kernel): what the kernel reads. Built once per input by `prepare`, so a
    benchmark can time the kernel apart from the quantisation."""

    def __init__(self, q8, q_scale, k8, k_scale, vt8, v_log2, v_out, dtype, shape, cfg):
        self.q8, self.q_scale, self.k8, self.k_scale = q8, q_scale, k8, k_scale
        self.vt8, self.v_log2, self.v_out = vt8, v_log2, v_out
        self.dtype, self.shape, self.cfg = dtype, shape, cfg


def fold_v_scales(v_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log2 of P's factor per key block, O's factor per head) from V's block scales (module docstring)."""
    top = v_scale.amax(-1)
    return torch.log2(P_SCALE * v_scale / top[..., None]).contiguous(), (top / P_SCALE).contiguous()


def prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rotate: bool = False,
            cfg: dict | None = None) -> Quantized:
    """Quantise q, k (after the rotation, if asked) and v per block for the kernel that will run
    (cfg None: this file's Triton kernel; else a gluon_fwd config, whose blocks the scales follow)."""
    if cfg is None:
        block_m, block_n, _, _ = blocks(q.shape[-1])
    else:
        block_m, block_n = cfg["BLOCK_M"] // cfg["PARTS"], cfg["BLOCK_N"]
    dtype, shape = q.dtype, q.shape
    if rotate:
        q, k = incoherent(q, k)
    q8, qs = quantize(q, block_m)
    k8, ks = quantize(k, block_n)
    vt8, vs = quantize(v, block_n, transpose=True, wgmma_order=cfg is not None)
    return Quantized(q8, qs, k8, ks, vt8, *fold_v_scales(vs), dtype, shape, cfg)


def forward(x: Quantized, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(o in the inputs' dtype, lse float32) from inputs prepared for this file's kernel (cfg None)."""
    if x.cfg is not None:
        raise ValueError("fp8.forward runs inputs prepared with cfg=None; a Gluon config runs in gluon_fwd.forward_fp8")
    B, H, SQ, D = x.shape
    HKV, SK = x.k8.shape[1], x.k8.shape[2]
    block_m, block_n, warps, stages = blocks(D)
    o = torch.empty((B, H, SQ, D), dtype=x.dtype, device=x.q8.device)
    lse = torch.empty((B, H, SQ), dtype=torch.float32, device=x.q8.device)
    _fp8_fwd_kernel[(triton.cdiv(SQ, block_m), B * H)](
        x.q8, x.k8, x.vt8, x.q_scale, x.k_scale, x.v_log2, x.v_out, o, lse,
        *x.q8.stride()[:3], *x.k8.stride()[:3], *x.vt8.stride()[:3], *o.stride()[:3],
        H, H // HKV, SQ, SK, x.q_scale.shape[-1], x.k_scale.shape[-1], sm_scale * LOG2E,
        D=D, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal), ROUND_FIRST=interpreting(),
        num_warps=warps, num_stages=stages)
    return o, lse
