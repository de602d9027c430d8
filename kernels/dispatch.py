"""The package's face: every public entry point, its argument checks, and the plan that picks a backend.

    flash_attention(q, k, v, causal, sm_scale, return_lse, window_size)   training attention, differentiable
    flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, ...)
                                                             the same over a packed batch of sequences
    flash_attention_fp8(q, k, v, causal, sm_scale, incoherent, return_lse)   FP8 forward (inference)
    flash_decode(q, k_cache, v_cache, seq_lens, block_table, num_splits, scale, return_lse)   one new token
    ring_attention(q, k, v, group, causal, layout, sm_scale, impl)           a sequence split over ranks

The backends, each a module that knows its own kernels and limits and nothing of this file:

    triton_fa2.py   FlashAttention-2 in plain Triton, forward and backward: any CUDA GPU, the
                    interpreter, every shape, fp16, bf16 and fp32.
    gluon_fwd.py    a warp-specialised Gluon forward for Hopper (FlashAttention-3's techniques),
                    bf16/fp16 in the scope gluon_common.applicable states; also the FP8 forward there.
    gluon_bwd.py    the backward's two passes in Gluon for Hopper, same scope.
    fp8.py          block quantisation to e4m3 and a plain Triton FP8 forward (everywhere else).
    decode.py       split-KV decode (FlashDecoding), contiguous or paged cache.
    ring.py         ring attention over torch.distributed, given a block-attention function.

Shared helpers live in common.py, fastlaunch.py and gluon_common.py.

The plans, chosen per shape bucket the first time it is seen and kept for the process:

- Forward, FORWARD (env DRILL_FLASH_FWD): "auto" (default) times triton_fa2's tuned kernel against
  each of gluon_fwd's CANDIDATES for the calls the Gluon kernel covers on a Hopper GPU and keeps the
  fastest whose output matches; "triton" never runs Gluon; "gluon" runs it wherever it applies.
  Pinned configs (triton_fa2.FORCED_CONFIGS), DRILL_FLASH_TUNE=0 and the interpreter run Triton.
- Backward, BACKWARD (env DRILL_FLASH_BWD): "auto" (default) runs the dK/dV pass and then the dQ pass,
  each from the faster of triton_fa2's and gluon_bwd's kernel per shape bucket; "split" both in
  Triton; "hopper" both in Gluon where covered; "onepass" (dQ added in key-block order) and
  "atomic" (dQ by atomic adds, not deterministic) are triton_fa2's single-kernel variants, slower at
  every size measured and kept for comparison. Every plan but "atomic" sums in a fixed order, so
  the gradients are bitwise reproducible whichever kernel runs.
- Sliding windows and packed (varlen) batches run triton_fa2's kernels and its split backward only:
  the Gluon kernels take neither, and the one-pass variants take no window.
- FP8: gluon_fwd's FP8 kernel on Hopper for the shapes it covers (FP8_GLUON_CONFIGS), fp8.py's
  Triton kernel elsewhere.
"""

from __future__ import annotations

import math
import os

import torch
import triton

from . import decode, fp8, ring, triton_fa2
from .common import (HEAD_DIMS, bucket, check_attention_arguments, check_cache_reads, check_decode_arguments,
                     check_varlen_arguments, check_window_size, empty_in_layout, is_hopper, last_dim_contiguous, pow2)
from .fastlaunch import interpreting

__all__ = ["flash_attention", "flash_attention_fp8", "flash_attention_varlen", "flash_decode", "ring_attention"]


# --------------------------------------------------------------------------- the plans

FORWARD = os.environ.get("DRILL_FLASH_FWD", "auto")
BACKWARD = os.environ.get("DRILL_FLASH_BWD", "auto")
BACKWARD_PLANS = ("auto", "split", "hopper", "onepass", "atomic")
_FWD_PLAN: dict[tuple, dict | None] = {}  # shape bucket -> the Gluon config chosen, None for Triton
_BWD_PLAN: dict[tuple, dict] = {}  # shape bucket -> {"kv": Gluon config or None for Triton, "q": ...}
PLAN_TIMES: dict[str, dict[str, float]] = {}  # "fwd-plan <bucket>" etc. -> each candidate's best median (ms)


def _tuning() -> bool:
    """Whether the auto plans may time candidates: not with pinned configs or DRILL_FLASH_TUNE=0."""
    return not triton_fa2.FORCED_CONFIGS and os.environ.get("DRILL_FLASH_TUNE", "1") != "0"


def _fastest(runs: dict, label: str, rounds: int = 2):
    """The key of the fastest of `runs` (key -> callable). Each is timed by do_bench (100 ms; with 50
    the choice flipped between configs 2-3 % apart from run to run) in `rounds` interleaved rounds
    and kept at its best, so one timing caught by a dip of the GPU's clock cannot decide (with a
    single round a plan once took a forward config 10-20 % slower than the one beside it). Medians,
    the statistic Triton's autotuner and the benchmark tables compare: the Triton kernel's mean can
    sit well under its median (0.681 against 0.724 ms at D = 64, 4k causal), so by the mean a plan
    can take it over a config whose median is faster. Every candidate's time goes to
    PLAN_TIMES[label], for the benchmark's report."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for key, fn in runs.items():
            best[key] = min(best[key], triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))
    PLAN_TIMES[label] = {("triton" if key is None else f"gluon #{key}"): ms for key, ms in best.items()}
    return min(best, key=best.get)


def _gluon_forward(q, k, v, causal: bool, sm_scale: float):
    """gluon_fwd's (o, lse) when the plan picks it for this call, else None."""
    if FORWARD == "triton" or interpreting() or not q.is_cuda:
        return None
    if FORWARD == "auto" and ("fwd" in triton_fa2.FORCED_CONFIGS or os.environ.get("DRILL_FLASH_TUNE", "1") == "0"):
        return None
    from . import gluon_common  # Gluon: imported only where it may run

    if not gluon_common.applicable(q, k, v, causal):
        return None
    from . import gluon_fwd

    if FORWARD == "gluon":
        return gluon_fwd.forward(q, k, v, causal, sm_scale)
    B, H, SQ, D = q.shape
    # One choice for both layouts: each kernel runs [B, S, H, D] views as fast as [B, H, S, D], so
    # separate choices would only add the tuner's noise between them.
    key = (D, causal, str(q.dtype), H // k.shape[1], bucket(B * H), bucket(SQ), bucket(k.shape[2]))
    if key not in _FWD_PLAN:
        _FWD_PLAN[key] = _pick_forward(q, k, v, causal, sm_scale, gluon_fwd, "fwd-plan " + " ".join(map(str, key)))
    cfg = _FWD_PLAN[key]
    return None if cfg is None else gluon_fwd.forward(q, k, v, causal, sm_scale, cfg)


def _pick_forward(q, k, v, causal, sm_scale, gluon_fwd, label: str) -> dict | None:
    """The faster of triton_fa2's tuned kernel and each Gluon config (_fastest); a Gluon config whose
    output differs from the Triton kernel's is never chosen."""
    want = triton_fa2.forward(q, k, v, causal, sm_scale)[0].float()  # also tunes the Triton configs
    runs = {None: lambda: triton_fa2.forward(q, k, v, causal, sm_scale)}
    cands = gluon_fwd.CANDIDATES[q.shape[-1]]
    rejected = []
    for i, cfg in enumerate(cands):
        try:
            o = gluon_fwd.forward(q, k, v, causal, sm_scale, cfg)[0]
        except Exception:  # a config that does not compile or fit
            rejected.append(i)
            continue
        if torch.allclose(o.float(), want, atol=2e-2, rtol=0):
            runs[i] = lambda cfg=cfg: gluon_fwd.forward(q, k, v, causal, sm_scale, cfg)
        else:
            rejected.append(i)
    i = _fastest(runs, label)
    PLAN_TIMES[label].update({f"gluon #{j}": math.inf for j in rejected})  # inf: failed or differed
    return None if i is None else cands[i]


def _pick_backward(gluon_bwd, triton_kv, triton_q, q, k, v, do, dq, dk, dv, lse2, delta, causal,
                   sm_scale, label: str = "bwd-plan") -> dict:
    """Per pass, the faster of triton_fa2's tuned kernel and each Gluon config (_fastest); a Gluon
    config whose gradients differ from the Triton kernel's is never chosen. Each pass writes only
    its own outputs, so the two are timed apart."""
    picks = {}
    for name, run_triton, outs, cands, run_gluon in (
            ("kv", triton_kv, (dk, dv), gluon_bwd.CANDIDATES[q.shape[-1]],
             lambda c: gluon_bwd.backward_kv(q, k, v, do, dk, dv, lse2, delta, causal, sm_scale, c)),
            ("q", triton_q, (dq,), gluon_bwd.Q_CANDIDATES[q.shape[-1]],
             lambda c: gluon_bwd.backward_q(q, k, v, do, dq, lse2, delta, causal, sm_scale, c))):
        run_triton()  # also tunes the Triton configs
        want = [t.to(torch.float32, copy=True) for t in outs]  # the Gluon runs overwrite outs
        runs = {None: run_triton}
        for i, cfg in enumerate(cands):
            try:
                run_gluon(cfg)
            except Exception:  # a config that does not compile or fit
                continue
            if all(torch.allclose(t.float(), w, atol=2e-2, rtol=2e-2) for t, w in zip(outs, want)):
                runs[i] = lambda cfg=cfg: run_gluon(cfg)
        i = _fastest(runs, label.replace("bwd-plan", f"bwd-plan {name}", 1))
        picks[name] = None if i is None else cands[i]
    return picks


def _forward(q, k, v, causal: bool, sm_scale: float, window: tuple[int, int] | None = None):
    if window is not None:  # the Gluon kernels have no window
        return triton_fa2.forward(q, k, v, False, sm_scale, window)
    done = _gluon_forward(q, k, v, causal, sm_scale)
    return done if done is not None else triton_fa2.forward(q, k, v, causal, sm_scale)


def _backward(q, k, v, o, lse, do, dlse, causal: bool, sm_scale: float, window: tuple[int, int] | None = None):
    if BACKWARD not in BACKWARD_PLANS:
        raise ValueError(f"dispatch.BACKWARD = {BACKWARD!r}: expected one of {', '.join(BACKWARD_PLANS)}")
    do, delta, lse2 = triton_fa2.backward_prep(o, do, lse, dlse)
    dq, dk, dv = empty_in_layout(q), empty_in_layout(k), empty_in_layout(v)
    if window is not None:  # only triton_fa2's split passes take a window
        passes = triton_fa2.BackwardPasses(q, k, v, do, dq, dk, dv, lse2, delta, False, sm_scale, window)
        passes.kv()
        passes.q()
        return dq, dk, dv
    passes = triton_fa2.BackwardPasses(q, k, v, do, dq, dk, dv, lse2, delta, causal, sm_scale)
    if BACKWARD in ("onepass", "atomic"):
        passes.one_pass(atomic=BACKWARD == "atomic")
        return dq, dk, dv
    picks = {"kv": None, "q": None}
    if BACKWARD != "split" and q.is_cuda and not interpreting():
        from . import gluon_bwd  # Gluon: imported only where it may run

        if gluon_bwd.applicable(q, k, v, do, causal):
            B, H, SQ, D = q.shape
            forced = triton_fa2.FORCED_CONFIGS
            if BACKWARD == "hopper":
                picks = {"kv": forced.get("bwd_kv_gluon") or gluon_bwd.CANDIDATES[D][0],
                         "q": forced.get("bwd_q_gluon") or gluon_bwd.Q_CANDIDATES[D][0]}
            elif _tuning():
                key = (D, causal, str(q.dtype), H // k.shape[1], bucket(B * H), bucket(SQ), bucket(k.shape[2]))
                if key not in _BWD_PLAN:
                    _BWD_PLAN[key] = _pick_backward(gluon_bwd, passes.kv, passes.q, q, k, v, do, dq, dk, dv, lse2,
                                                    delta, causal, sm_scale, "bwd-plan " + " ".join(map(str, key)))
                picks = _BWD_PLAN[key]
    if picks["kv"]:
        gluon_bwd.backward_kv(q, k, v, do, dk, dv, lse2, delta, causal, sm_scale, picks["kv"])
    else:
        passes.kv()
    if picks["q"]:
        gluon_bwd.backward_q(q, k, v, do, dq, lse2, delta, causal, sm_scale, picks["q"])
    else:
        passes.q()
    return dq, dk, dv


def tuned_configs() -> dict:
    """The configs chosen so far, keyed by (kernel, shape bucket...): triton_fa2's tuner, then
    "fwd-plan" and "bwd-plan" rows saying which kernel the auto plans chose (a Gluon config, or
    "triton")."""
    out = triton_fa2.tuned_configs()
    out.update({"fwd-plan " + " ".join(map(str, k)): dict(v, kernel="gluon") if v else {"kernel": "triton"}
                for k, v in _FWD_PLAN.items()})
    for k, v in _BWD_PLAN.items():
        for kind, cfg in v.items():
            name = f"bwd-plan {kind} " + " ".join(map(str, k))
            out[name] = dict(cfg, kernel="gluon") if cfg else {"kernel": "triton"}
    return out


# --------------------------------------------------------------------------- flash_attention


def _band(window_size: tuple[int, int], causal: bool, max_q: int, max_k: int) -> tuple[bool, tuple | None]:
    """(causal, window) for the kernels from FA2's window_size, for sequences of at most max_q
    queries and max_k keys. The default (-1, -1) changes nothing. A window wide enough to bound no
    row (left >= max_k - 1 reaches key 0 from every row, right >= max_q - 1 the last key) is
    dropped, so it runs the plain kernels: (-1, -1) the unmasked, (-1, 0) the causal one. Other
    windows come back as (left, right) >= 0, an unbounded side as max_q + max_k (past every key,
    and small enough for int32 arithmetic in the kernel), with causal folded into right = 0."""
    if window_size == (-1, -1):
        return causal, None
    left, right = window_size
    if causal:
        right = 0
    far = max_q + max_k
    left = -1 if left < 0 or left >= max_k - 1 else left
    right = -1 if right < 0 or right >= max_q - 1 else right
    if left == -1 and right in (-1, 0):
        return right == 0, None
    return False, (far if left == -1 else left, far if right == -1 else right)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, window):
        o, lse = _forward(q, k, v, causal, sm_scale, window)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale, ctx.window = causal, sm_scale, window
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        dq, dk, dv = _backward(q, k, v, o, lse, do, dlse, ctx.causal, ctx.sm_scale, ctx.window)
        return dq, dk, dv, None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None, return_lse: bool = False, *,
                    window_size: tuple[int, int] = (-1, -1)):
    """softmax(q k^T * sm_scale [+ bottom-right causal mask]) v, fused (triton_fa2.py has the algorithm).

    q [B, H, Sq, D]; k, v [B, Hkv, Sk, D] with Hkv dividing H (GQA; query head h uses key/value
    head h // (H / Hkv)); any strides, e.g. [B, S, H, D] tensors passed as .transpose(1, 2).
    D any size from 1 to 256 (powers of two from 16 run as they are, others zero-padded); v's head
    dim Dv may differ from D, e.g. DeepSeek-V3's D = 192, Dv = 128. fp16, bf16 or fp32 (fp32 in
    full precision unless PyTorch allows TF32 matmuls). Returns o [B, H, Sq, Dv] in q's layout (a view of a padded
    tensor where D or Dv is not a power of two or they differ), or (o, lse) with lse [B, H, Sq]
    float32 natural-log logsumexp of the scaled scores (-inf for rows that see no key).
    Differentiable in q, k, v (dk and dv summed over each group), and through lse too (its
    gradient folds into delta). A ValueError names the argument the kernels cannot take.

    window_size (left, right), FlashAttention-2's sliding window: query row i, whose diagonal key
    is j0 = i + Sk - Sq (bottom-right aligned), sees keys j0 - left <= j <= j0 + right; -1 leaves
    that side unbounded, and causal=True sets right = 0. A row that sees no key gets o = 0 and
    lse = -inf. A window runs triton_fa2's kernels only (on Hopper the Gluon kernels take the
    unwindowed calls), visiting only the key blocks inside the band.
    """
    sm_scale = check_attention_arguments(q, k, v, sm_scale, padded=True)
    window_size = check_window_size(window_size)
    D, dv = q.shape[-1], v.shape[-1]
    if D != dv or D not in HEAD_DIMS:
        # The kernels take one power-of-two head dim: zero columns in q and k add nothing to a score,
        # zero columns in v give output columns that are cut off; autograd slices the gradients
        # back. Costs a copy of q, k, v and (D_pad - D) / D more matmul work.
        pad = max(16, pow2(max(D, dv)))
        q, k, v = (torch.nn.functional.pad(t, (0, pad - t.shape[-1])) for t in (q, k, v))
        o, lse = flash_attention(q, k, v, causal, sm_scale, return_lse=True, window_size=window_size)
        return (o[..., :dv], lse) if return_lse else o[..., :dv]
    if interpreting() and q.dtype == torch.bfloat16:
        # Triton's interpreter has no bf16 arithmetic (it computes on the bit patterns): run fp32,
        # round the output as a bf16 kernel would; gradients flow back through the casts
        o, lse = flash_attention(q.float(), k.float(), v.float(), causal, sm_scale, return_lse=True,
                                 window_size=window_size)
        return (o.to(torch.bfloat16), lse) if return_lse else o.to(torch.bfloat16)
    q, k, v = (last_dim_contiguous(t) for t in (q, k, v))
    causal, window = _band(window_size, bool(causal), q.shape[2], k.shape[2])
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = _FlashAttention.apply(q, k, v, causal, float(sm_scale), window)
    else:  # no graph to record: skip autograd's bookkeeping (host time)
        o, lse = _forward(q, k, v, causal, float(sm_scale), window)
    return (o, lse) if return_lse else o


# --------------------------------------------------------------------------- flash_attention_varlen


def _heads_view(t: torch.Tensor) -> torch.Tensor:
    """A packed [total, heads, D] tensor as the [1, heads, total, D] view the kernels read."""
    return t.permute(1, 0, 2)[None]


def _packed(t: torch.Tensor) -> torch.Tensor:
    """The inverse of _heads_view: [1, heads, total, D] -> [total, heads, D]."""
    return t[0].permute(1, 0, 2)


def _varlen_forward(q, k, v, causal, sm_scale, window, varlen):
    """(o [total_q, H, Dv], lse [H, total_q]) of packed q, k, v."""
    H, total_q = q.shape[1], q.shape[0]
    if total_q == 0 or k.shape[0] == 0:  # nothing to launch: every row sees no key
        return (q.new_zeros((total_q, H, v.shape[-1])),
                torch.full((H, total_q), float("-inf"), dtype=torch.float32, device=q.device))
    o, lse = triton_fa2.forward(_heads_view(q), _heads_view(k), _heads_view(v), causal, sm_scale, window, varlen)
    return _packed(o), lse[0]


def _varlen_backward(q, k, v, o, lse, do, dlse, causal, sm_scale, window, varlen):
    if q.shape[0] == 0 or k.shape[0] == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    q4, k4, v4 = _heads_view(q), _heads_view(k), _heads_view(v)
    do4, delta, lse2 = triton_fa2.backward_prep(_heads_view(o), _heads_view(do), lse[None],
                                                None if dlse is None else dlse[None])
    dq, dk, dv = empty_in_layout(q4), empty_in_layout(k4), empty_in_layout(v4)
    passes = triton_fa2.BackwardPasses(q4, k4, v4, do4, dq, dk, dv, lse2, delta, causal, sm_scale, window, varlen)
    passes.kv()
    passes.q()
    return _packed(dq), _packed(dk), _packed(dv)


class _FlashAttentionVarlen(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, window, varlen):
        o, lse = _varlen_forward(q, k, v, causal, sm_scale, window, varlen)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (causal, sm_scale, window, varlen)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        return *_varlen_backward(q, k, v, o, lse, do, dlse, *ctx.args), None, None, None, None


def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                           sm_scale: float | None = None, return_lse: bool = False, *,
                           window_size: tuple[int, int] = (-1, -1)):
    """flash_attention over a packed batch of sequences of different lengths (FlashAttention-2's
    flash_attn_varlen_func): no padding is stored or computed.

    q [total_q, H, D]; k, v [total_k, Hkv, D] and [total_k, Hkv, Dv] (Hkv dividing H); last dim
    contiguous, any row and head strides. cu_seqlens_q, cu_seqlens_k int32 (or int64) [B + 1],
    B >= 1, from 0, non-decreasing, ending at total_q and total_k: sequence b's queries are rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1], its keys rows cu_seqlens_k[b]:cu_seqlens_k[b + 1].
    max_seqlen_q, max_seqlen_k: at least the longest sequence (they size the grid). causal and
    window_size as flash_attention's, per sequence, bottom-right aligned per sequence; a sequence
    may be empty, and rows of one without keys give o = 0, lse = -inf. Head dims, dtypes and
    the zero padding of other head dims as flash_attention's.

    Returns o [total_q, H, Dv], or (o, lse) with lse [H, total_q] float32 natural log (FA2's
    layout). Differentiable in q, k, v (and through lse). Runs triton_fa2's kernels and split
    backward. A ValueError names the argument at fault; checking cu_seqlens reads them on the host
    once per pair of tensors (remembered by address and version).
    """
    sm_scale, cu_q, cu_k = check_varlen_arguments(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                  sm_scale)
    window_size = check_window_size(window_size)
    D, dv = q.shape[-1], v.shape[-1]
    if D != dv or D not in HEAD_DIMS:  # zero padding, as flash_attention
        pad = max(16, pow2(max(D, dv)))  # the kernels' smallest head dim is 16
        q, k, v = (torch.nn.functional.pad(t, (0, pad - t.shape[-1])) for t in (q, k, v))
        o, lse = flash_attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal, sm_scale,
                                        return_lse=True, window_size=window_size)
        return (o[..., :dv], lse) if return_lse else o[..., :dv]
    if interpreting() and q.dtype == torch.bfloat16:  # no bf16 arithmetic in the interpreter: see flash_attention
        o, lse = flash_attention_varlen(q.float(), k.float(), v.float(), cu_q, cu_k, max_seqlen_q, max_seqlen_k,
                                        causal, sm_scale, return_lse=True, window_size=window_size)
        return (o.to(torch.bfloat16), lse) if return_lse else o.to(torch.bfloat16)
    causal, window = _band(window_size, bool(causal), max_seqlen_q, max_seqlen_k)
    varlen = triton_fa2.Varlen(cu_q, cu_k, max_seqlen_q, max_seqlen_k)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = _FlashAttentionVarlen.apply(q, k, v, causal, float(sm_scale), window, varlen)
    else:
        o, lse = _varlen_forward(q, k, v, causal, float(sm_scale), window, varlen)
    return (o, lse) if return_lse else o


# --------------------------------------------------------------------------- FP8

# The Gluon config per (head dim, causal), in gluon_fwd's config format: the fastest of its
# candidates with FP8=True at 4k and 16k on an H200 (kernels/NOTES.md, FP8). A head dim not here
# runs fp8.py's Triton kernel.
FP8_GLUON_CONFIGS: dict[tuple[int, bool], dict] = {
    (64, False): dict(BLOCK_M=192, BLOCK_N=128, STAGES=3, num_warps=4, maxnreg=None, PARTS=3, PERSISTENT=True),
    (64, True): dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, num_warps=4, maxnreg=128, PARTS=1, PERSISTENT=False),
    (128, False): dict(BLOCK_M=128, BLOCK_N=128, STAGES=2, num_warps=4, maxnreg=None, PARTS=2, PERSISTENT=True),
    (128, True): dict(BLOCK_M=128, BLOCK_N=128, STAGES=2, num_warps=4, maxnreg=None, PARTS=2, PERSISTENT=True),
}


def fp8_plan(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict | None:
    """The Gluon config that runs this FP8 call, or None for fp8.py's Triton kernel."""
    cfg = FP8_GLUON_CONFIGS.get((q.shape[-1], bool(causal)))
    if cfg is None or not is_hopper(q):
        return None
    (B, H, SQ, D), SK = q.shape, k.shape[2]
    if q.dtype not in (torch.bfloat16, torch.float16) or SQ % 128 or SK % 128 or SQ < cfg["BLOCK_M"]:
        return None
    if (causal and SQ != SK) or max(B * H * SQ, k.shape[0] * k.shape[1] * SK) * D >= 2**31:  # int32 offsets
        return None
    return cfg


def fp8_prepare(q, k, v, causal: bool = False, rotate: bool = False) -> fp8.Quantized:
    """q, k, v quantised for the kernel fp8_plan picks (fp8.prepare)."""
    return fp8.prepare(q, k, v, rotate=rotate, cfg=fp8_plan(q, k, causal))


def fp8_forward(x: fp8.Quantized, causal: bool, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(o in the inputs' dtype, lse float32) from prepared inputs, on the kernel they were prepared for."""
    if x.cfg is None:
        return fp8.forward(x, causal, sm_scale)
    from . import gluon_fwd  # Gluon: imported only where it runs

    return gluon_fwd.forward_fp8(x.q8, x.k8, x.vt8, (x.q_scale, x.k_scale, x.v_log2, x.v_out), causal, sm_scale,
                                 x.cfg, x.dtype)


def flash_attention_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None, incoherent: bool = False, return_lse: bool = False):
    """softmax(q kᵀ · sm_scale [+ bottom-right causal mask]) v with both matmuls in FP8 (e4m3),
    per-block scales, and optionally incoherent processing of q and k (fp8.py's docstring).
    Shapes as flash_attention. Forward only: nothing here is differentiable. Returns o in q's
    dtype, or (o, lse)."""
    sm_scale = check_attention_arguments(q, k, v, sm_scale, "flash_attention_fp8")
    with torch.no_grad():
        o, lse = fp8_forward(fp8_prepare(q, k, v, causal, rotate=incoherent), causal, sm_scale)
    return (o, lse) if return_lse else o


# --------------------------------------------------------------------------- decode


def flash_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor,
                 block_table: torch.Tensor | None = None, num_splits: int | None = None, *,
                 scale: float | None = None, return_lse: bool = False):
    """Decode attention of one new token per sequence over its KV cache (decode.py has the algorithm).

    q [B, Hq, D]; k_cache, v_cache [B, Hkv, S_max, D], or with block_table int [B, max_pages] page
    pools [num_pages, page_size, Hkv, D] (sequence b's logical page p is physical page
    block_table[b, p]; entries past its last page are not read); seq_lens int [B], 1 <= seq_lens[b]
    (<= S_max, or within the sequence's pages). Hq a multiple of Hkv (GQA). num_splits None picks
    a count that fills the GPU. scale multiplies the scores (None: 1/sqrt(D)). Returns o [B, Hq, D]
    in q's dtype, or with return_lse (o, lse): lse [B, Hq] float32, the natural-log logsumexp of each
    head's scaled scores. A ValueError names the argument at fault, also for a page a sequence reads
    that lies outside the pool.
    """
    B, Hq, hkv, D = check_decode_arguments(q, k_cache, v_cache, seq_lens, block_table)
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)
                                   or num_splits < 1):
        raise ValueError(f"num_splits must be None or a positive int, got {num_splits!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not 0 < scale < math.inf):
        raise ValueError(f"scale must be None or a positive finite number, got {scale!r}")
    check_cache_reads(seq_lens, block_table, k_cache)
    return decode.forward(q, k_cache, v_cache, seq_lens, block_table, num_splits, scale, bool(return_lse))


# --------------------------------------------------------------------------- ring attention


def _flash_block(q, k, v, causal: bool, scale: float):
    return flash_attention(q, k, v, causal=causal, sm_scale=scale, return_lse=True)


def _ring_block(q: torch.Tensor, impl: str):
    """The block attention ring.forward runs: flash_attention on CUDA ("auto") or always ("flash"),
    else ring.torch_block."""
    if impl == "torch":
        return ring.torch_block
    ok = q.dtype in (torch.float16, torch.bfloat16, torch.float32) and q.shape[-1] in (16, 32, 64, 128, 256)
    if impl == "flash":
        if not ok:
            raise ValueError(f"impl='flash': flash_attention cannot run q of dtype {q.dtype} with head dim "
                             f"{q.shape[-1]} (float16, bfloat16 or float32; D a power of two, 16 to 256)")
        return _flash_block
    return _flash_block if ok and q.is_cuda else ring.torch_block


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group=None, causal: bool = False, *,
                   layout: str = "contiguous", sm_scale: float | None = None, impl: str = "auto"):
    """This rank's rows of softmax(q kᵀ·scale [+ causal mask]) v over the whole sequence (ring.py).

    q, k, v  [B, H, S/W, D] or [S/W, D]: this rank's rows, as `ring.shard(x, rank, W, layout)` gives
    group    process group (None: the default group)
    causal   mask by global position (S_q = S_k, so top-left and bottom-right agree)
    layout   "contiguous" or "zigzag" (ring.py's docstring); zigzag needs S/W even
    impl     "auto" (flash_attention on CUDA, torch otherwise), "flash" or "torch"
    returns  (o, lse): o like q; lse [B, H, S/W] (or [S/W]), natural log, float32 (float64 for float64 input)
    """
    if impl not in ("auto", "flash", "torch"):
        raise ValueError(f"impl must be 'auto', 'flash' or 'torch', not {impl!r}")
    if layout not in ring.LAYOUTS:
        raise ValueError(f"layout must be one of {ring.LAYOUTS}, not {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor [B, H, S/W, D] or [S/W, D], got {type(t).__name__}")
    if q.dim() not in (2, 4) or k.shape != v.shape or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"expected q, k, v of shape [B, H, S, D] or [S, D]: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"each rank must hold as many query rows as key rows: q {tuple(q.shape)}, k {tuple(k.shape)}")
    flat = q.dim() == 2
    if flat:
        q, k, v = (t[None, None] for t in (q, k, v))
    if layout == "zigzag" and q.shape[-2] % 2:
        raise ValueError(f"layout 'zigzag' needs an even number of rows per rank, not {q.shape[-2]}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    o, lse = ring.forward(q, k, v, group, causal, layout, scale, _ring_block(q, impl))
    return (o[0, 0], lse[0, 0]) if flat else (o, lse)
