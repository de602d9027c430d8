"""Hidden checks for 11_triton_backward.py.

Two ways of grading, chosen by where the worker runs (07's Mode):
  * interpreter (no GPU; drill's runner sets TRITON_INTERPRET=1): small fp32 shapes on the
    CPU, correctness only; the fp16/bf16 and speed checks skip, saying so.
  * gpu: the same correctness checks in fp16, then fp16 and bf16 beside drill's reference
    backward, then TFLOP/s (backward = 2.5 × the forward's 4·B·H·S²·D, half when causal)
    against the reference backward and PyTorch SDPA's (backends pinned and named).

The yardstick is torch autograd through plain attention in float64, here in the trusted
process. The forward's o and lse given to the user are computed here too (float64, then o in
the inputs' dtype and lse in fp32). The user's code runs only in the sandboxed subject
(_triton_bwd_probe.py rebuilds the tensors there with NaN after each, poisons the user's
torch.empty allocations and records Triton launches and torch compute calls); dq, dk and dv
come back by value. What the probe reports can fail a check, never pass one.

"Rows that see no key": with Sq = Sk every row of a plain or causal forward sees key 0, so
such rows only arise where the forward masked more (padding, packed documents). The contract
(the stub says it) is 03's: such a row has lse = -inf and o = 0, its p row is 0, so its dq row
is 0 and it adds nothing to dk and dv. The check gives a few rows lse = -inf, o = 0 and a
nonzero do; the yardstick is autograd with those rows' do set to 0.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from drill.grader import fixtures, roundtrip
from drill.grader.expect import fail, max_error, note

from . import _triton_forward_support as tf

MODE = tf.current_mode()
GPU = MODE is not None and MODE.gpu
PROBE = Path(__file__).with_name("_triton_bwd_probe.py")
HELPERS = (Path(__file__).with_name("_triton_probe.py"), PROBE)  # the backward probe builds on 07's
NAMES = ("dq", "dk", "dv")
POISON = tf.POISON
FLOOR = tf.FLOOR
LSE_ULPS = 8.0  # units of |lse|·eps(fp32): p = exp(s - lse) carries lse's rounding


def pick(interpreter, gpu):
    """Shapes for this run: tiny ones under the interpreter (it is slow), real ones on a GPU."""
    return gpu if GPU else interpreter


@pytest.fixture
def mode():
    if MODE is None:
        fail(tf.NO_MODE)
    return MODE


# --------------------------------------------------------------------------- inputs and the yardstick


@dataclass
class Case:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    lse: torch.Tensor  # fp32 [B, H, S]
    do: torch.Tensor
    causal: bool
    sm_scale: float | None
    empty_rows: tuple = ()  # rows given lse = -inf and o = 0 (they saw no key)

    @property
    def scale(self) -> float:
        return tf.default_scale(self.q.shape[3], self.sm_scale)

    def tensors(self):
        return self.q, self.k, self.v, self.o, self.lse, self.do

    def describe(self) -> str:
        B, H, S, D = self.q.shape
        bits = [f"B={B}, H={H}, S={S}, D={D}, {str(self.q.dtype).removeprefix('torch.')}"]
        if not self.q.is_contiguous():
            bits.append("non-contiguous q, k, v, o, do, lse")
        if self.empty_rows:
            bits.append(f"rows {list(self.empty_rows)} with lse = -inf and o = 0")
        args = "q, k, v, o, lse, do" + (", causal=True" if self.causal else "") + (
            f", sm_scale={self.sm_scale:g}" if self.sm_scale is not None else "")
        return f"flash_attention_backward({args}) with " + ", ".join(bits)


def scores64(q, k, scale, causal, shift=0, dtype=torch.float64):
    s = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale
    if causal:
        S = q.shape[2]
        s = s.masked_fill(~tf.causal_keep(S, q.device, shift), -math.inf)
    return s


def make_case(B, H, S, D, mode, *, seed, causal=False, sm_scale=None, scale=1.0, layout="contiguous",
              dtype=None, empty_rows=(), shift_logits=None) -> Case:
    """q, k, v, do from N(0, scale²) (do from N(0, 1)), and the forward's o and lse computed here.

    layout="strided": q, do and o are transposed views of [B, S, H, D] tensors, v the second half
    of a packed [B, H, S, 2D] key-value tensor, k contiguous, lse a [B, H, S] view of an [H, B, S]
    tensor (its own stride_lb and stride_lh, rows at stride 1). shift_logits: every score moved
    by about that much (q[..., 0] and k[..., 0] pushed apart), e.g. -600.
    """
    dtype = dtype or mode.dtype
    gen = torch.Generator().manual_seed(fixtures.seed(seed))

    def draw(*shape, s=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * s

    q, k = draw(B, H, S, D, s=scale), draw(B, H, S, D, s=scale)
    v, do = draw(B, H, S, D), draw(B, H, S, D)
    if shift_logits is not None:
        a = (abs(shift_logits) * D ** 0.5) ** 0.5  # a² / √D = |shift|
        q[..., 0] += a
        k[..., 0] += -a if shift_logits < 0 else a
    q, k, v, do = (t.to(dtype) for t in (q, k, v, do))  # rounded first: the yardstick sees what the kernel sees
    s = scores64(q, k, tf.default_scale(D, sm_scale), causal)
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ v.double()
    for r in empty_rows:
        lse[:, :, r] = -math.inf
        o[:, :, r] = 0.0
    o, lse = o.to(dtype), lse.float()

    def place(t, how):
        t = t.to(mode.device)
        if how == "bshd":
            t = t.transpose(1, 2).contiguous().transpose(1, 2)
        elif how == "hbs":  # lse: stride_lb = S, stride_lh = B·S, rows still at stride 1
            t = t.transpose(0, 1).contiguous().transpose(0, 1)
        elif how == "packed":
            buf = torch.zeros(B, H, S, 2 * D, dtype=t.dtype, device=t.device)
            buf[..., D:] = t
            t = buf[..., D:]
        return tf.guarded(t, math.nan)

    strided = layout == "strided"
    hows = ("bshd", "plain", "packed", "bshd", "hbs", "bshd") if strided else ("plain",) * 6
    q, k, v, o, lse, do = (place(t, how) for t, how in zip((q, k, v, o, lse, do), hows))
    return Case(q, k, v, o, lse, do, causal, sm_scale, tuple(empty_rows))


def reference(case: Case):
    """(dq, dk, dv) in float64 by torch autograd through plain attention; rows that saw no key
    contribute nothing (their do is taken as 0)."""
    with torch.enable_grad():
        q, k, v = (t.detach().double().requires_grad_() for t in (case.q, case.k, case.v))
        o = torch.softmax(scores64(q, k, case.scale, case.causal), -1) @ v
        do = case.do.detach().double().clone()
        for r in case.empty_rows:
            do[:, :, r] = 0.0
        return torch.autograd.grad(o, (q, k, v), do)


def naive_low_precision(case: Case):
    """Autograd through three torch ops in the inputs' own dtype: the accuracy yardstick."""
    with torch.enable_grad():
        q, k, v = (t.detach().clone().requires_grad_() for t in (case.q, case.k, case.v))
        s = (q @ k.transpose(-1, -2)) * case.scale
        if case.causal:
            s = s.masked_fill(~tf.causal_keep(q.shape[2], q.device), -math.inf)
        o = torch.softmax(s, -1) @ v
        do = case.do.detach().clone()
        for r in case.empty_rows:
            do[:, :, r] = 0.0
        return torch.autograd.grad(o, (q, k, v), do)


def tolerances(case: Case, ref):
    """Per output: max(2 × naive attention's error in the same dtype, a floor) + lse's rounding.

    "Naive" is the worse of two yardsticks: autograd through plain attention in the inputs'
    dtype, and the backward's own equations in fp32. The second matters at large logits: fp32
    rounds each score by about |q|·|k|·eps, and D = rowsum(do ∘ o), taken from the exact o,
    no longer cancels that rounding out of rowsum(ds) as autograd's own softmax backward does;
    with large keys dq = ds·k·sm_scale magnifies what is left. Every FlashAttention backward
    has that error; it is not a mistake.
    """
    auto = naive_low_precision(case)
    eq32 = formula(case, dtype=torch.float32)
    lse = case.lse.double()
    finite = torch.isfinite(lse)
    lse_max = float(lse[finite].abs().max()) if bool(finite.any()) else 0.0
    # dp = do·vᵀ and D = do·o are O(|do|·|v|·√D) and ds = p·(dp − D) is their difference, rounded in
    # fp32 however small: with S = 1 (ds exactly 0) dq and dk are that rounding times |k| or |q|·scale.
    D = case.q.shape[3]
    mag = lambda t: float(t.detach().double().abs().max()) if t.numel() else 0.0  # noqa: E731
    cancel = 4 * 1.2e-7 * mag(case.do) * max(mag(case.v), mag(case.o)) * math.sqrt(D) * case.scale
    cancel_terms = (cancel * mag(case.k), cancel * mag(case.q), 0.0)
    out = []
    for a, e, r, c in zip(auto, eq32, ref, cancel_terms):
        # Relative to the gradient's own size: gradients are often far below 1 (dv ~ 1/√S), and a
        # floor of max(1, |x|) units would let errors of many percent through.
        big = max(float(r.abs().max()), 1e-3)
        errs = [float((n.to(r.device).double() - r).abs().max()) for n in (a, e)]
        err = max((x for x in errs if math.isfinite(x)), default=0.0)
        floor = FLOOR.get(case.q.dtype, 2e-5) * big
        out.append((max(2.0 * err, floor) + LSE_ULPS * lse_max * 1.2e-7 * big + c, err))
    return out


# --------------------------------------------------------------------------- known mistakes


def formula(case: Case, *, scale_s=None, shift=0, masked=True, delta=True, q_rows=None, k_rows=None,
            base2=False, dq_factor=None, dk_factor=None, dtype=torch.float64):
    """(dq, dk, dv) in float64 from the backward's equations, with a mistake switched in.

    scale_s: the scale used in the recomputed scores; shift/masked: the causal mask used;
    delta=False: D left out; q_rows/k_rows: only the first rows of q (or k) taken into the sums;
    base2: p = 2^(s·log2 e − lse) with a natural-log lse; dq_factor/dk_factor: the factor in
    place of sm_scale at the end.
    """
    scale = case.scale
    q, k, v, do, o = (t.to(dtype) for t in (case.q, case.k, case.v, case.do, case.o))
    lse = case.lse.to(dtype)
    s = scores64(q, k, scale if scale_s is None else scale_s, case.causal and masked, shift, dtype)
    safe = torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse)
    p = torch.exp(s - safe[..., None] * (math.log(2) if base2 else 1.0))
    if q_rows is not None:
        p[:, :, q_rows:] = 0.0
    if k_rows is not None:
        p[:, :, :, k_rows:] = 0.0
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    d = (do * o).sum(-1, keepdim=True) if delta else 0.0
    ds = p * (dp - d)
    dq = ds @ k * (scale if dq_factor is None else dq_factor)
    dk = ds.transpose(-1, -2) @ q * (scale if dk_factor is None else dk_factor)
    return dq, dk, dv


def mistakes(case: Case):
    """(variant (dq, dk, dv), likely mistake) pairs for one call."""
    scale = case.scale
    S, D = case.q.shape[2], case.q.shape[3]
    out = [
        (formula(case, delta=False), "D was left out: ds = p ∘ (dp − D) with D = rowsum(do ∘ o), computed "
                                     "first by _bwd_preprocess"),
        (formula(case, dq_factor=1.0, dk_factor=1.0), "dq and dk miss the factor sm_scale: s = sm_scale · q kᵀ, so "
                                                     "dq = sm_scale · ds k and dk = sm_scale · dsᵀ q"),
        (formula(case, dq_factor=1.0), "dq misses the factor sm_scale: dq = sm_scale · Σ ds k"),
        (formula(case, dk_factor=1.0), "dk misses the factor sm_scale: dk = sm_scale · Σ dsᵀ q"),
        (formula(case, dq_factor=scale * scale, dk_factor=scale * scale), "sm_scale was applied twice to dq and dk"),
        (formula(case, base2=True), "p mixes bases: lse is a natural log, so p = exp(s − lse); with exp2 use "
                                    "exp2(s·log2 e − lse·log2 e)"),
    ]
    for wrong, hint in ((1.0, "the recomputed scores were not scaled: s = (q kᵀ) · sm_scale before exp(s − lse)"),
                        (1.0 / math.sqrt(D), "sm_scale was ignored: 1/√D was used instead of the sm_scale passed in")):
        if abs(wrong - scale) > 1e-9 * scale:
            out.append((formula(case, scale_s=wrong, dq_factor=wrong, dk_factor=wrong), hint))
            out.append((formula(case, scale_s=wrong), hint))
    for bn in tf.BLOCK_CANDIDATES:
        full = S - S % bn
        if 0 < full < S:
            out.append((formula(case, k_rows=full), "the last, partial key block was skipped in the dQ kernel: "
                                                    "loop over range(0, S, BLOCK_N) and mask keys past S"))
            out.append((formula(case, q_rows=full), "the last, partial query block was skipped in the dK/dV kernel: "
                                                    "loop over range(lo, S, BLOCK_M) and mask rows past S"))
    if case.causal:
        out += [(formula(case, masked=False), "causal=True gave the unmasked gradients: apply the mask "
                                              "(p = 0 where key > query) when CAUSAL is set, in both kernels"),
                (formula(case, shift=-1), "query i must see key i too: keep j <= i, not j < i"),
                (formula(case, shift=1), "the mask lets query i see key i + 1: keep j <= i")]
    return out


def _same(got, want, tol) -> bool:
    want = want.to(got.device)  # the variants are computed on the mode's device, got came back to the CPU
    return got.shape == want.shape and bool(torch.isfinite(got).all()) and float((got - want).abs().max()) <= tol


def name_mistake(case: Case, got, wrong: list[int], tols) -> str:
    """The known mistake whose outputs match the wrong ones (each wrong output must match)."""
    for variant, hint in mistakes(case):
        if all(_same(got[i], variant[i], tols[i]) for i in wrong):
            if "in both kernels" in hint and set(wrong) == {1, 2}:
                hint = hint.replace("in both kernels", "in the dK/dV kernel too (dq is right)")
            elif "in both kernels" in hint and set(wrong) == {0}:
                hint = hint.replace("in both kernels", "in the dQ kernel too (dk and dv are right)")
            return hint
    return ""


def unwritten(got, name: str) -> str:
    rows = (got == POISON).all(dim=-1)  # [B, H, S]
    if not bool(rows.any()):
        return ""
    B, H, S = rows.shape
    if bool(rows.all()):
        return (f"no row of {name} was written: does its kernel store into it, and is it launched with at least "
                "one program per axis (triton.cdiv(S, BLOCK) is 1 even when S < BLOCK)?")
    per_row = rows.any(dim=0).any(dim=0)
    first = int(per_row.nonzero()[0])
    D = got.shape[-1]
    written = int((got[0, 0] != POISON).sum())  # a kernel built for head dim d fills S·d values of a head
    if first > 0 and written % S == 0 and 0 < written // S < D and D % (written // S) == 0:
        return (f"only {S}×{written // S} values of each head of {name} were written, as if the head dim were "
                f"{written // S}, not {D}: pass D = q.shape[-1] to the kernels (a tl.constexpr) rather than a "
                "fixed width")
    if first > 0 and bool(rows[..., first:].all()):
        return (f"rows {first}..{S - 1} of {name} were never written in any head: the grid must cover every row, "
                "triton.cdiv(S, BLOCK) programs, not S // BLOCK")
    if bool(rows.all(dim=-1).any()):
        return f"whole heads of {name} were never written: axis 1 of the grid must run over all B·H heads"
    idx = [int(i) for i in per_row.nonzero()[:6, 0]]
    return f"some rows of {name} were never written (rows {idx}…): is the store's mask or row offset wrong?"


# --------------------------------------------------------------------------- calling the user's code


@dataclass
class Reply:
    grads: list | None  # [dq, dk, dv] as arrays, or None
    observed: dict
    inputs_after: list | None
    launches: list


def call_user(sub, case: Case, *, guard="nan", return_inputs=False, tensors=None) -> Reply:
    """Run the user's flash_attention_backward in the subject on the case's tensors, laid out as here."""
    for helper in HELPERS:
        sub.use_helper(helper)
    ts = tensors or case.tensors()
    kwargs = {}
    if case.causal:
        kwargs["causal"] = True
    if case.sm_scale is not None:
        kwargs["sm_scale"] = case.sm_scale
    spec = {"device": str(case.q.device), "dtype": str(case.q.dtype).removeprefix("torch."),
            "return_inputs": return_inputs,
            "tensors": [{"stride": list(t.stride()), "guard": guard, "fp32": i == 4} for i, t in enumerate(ts)]}
    outcome = sub.flash_attention_backward.observe(*(tf.values(t) for t in ts),
                                                   helper={"module": PROBE.stem, "spec": spec}, **kwargs)
    observed = outcome.extra.get("observed")
    observed = observed if isinstance(observed, dict) else {}
    result = outcome.result
    grads = None
    if isinstance(result, list) and len(result) == 3 and all(isinstance(a, np.ndarray) and a.dtype.kind == "f"
                                                               for a in result):
        grads = result
    after = outcome.extra.get("inputs")
    after = [a for a in after if isinstance(a, np.ndarray)] if isinstance(after, list) else None
    return Reply(grads, observed, after, tf._launches(observed))


def as_grads(reply: Reply, case: Case) -> list[torch.Tensor]:
    """dq, dk, dv as float64 tensors, once they are known to be tensors shaped and typed like q."""
    call = case.describe()
    seen = reply.observed
    if seen.get("overran") is True:
        fail("your kernels wrote past the end of dq, dk or dv", called=call,
             got="values in the memory just after an output (drill keeps a guard there)",
             expected="no store outside the outputs",
             hint="mask every store: the last block sticks out past S, so store only rows < S")
    stored = seen.get("stores_outside")
    if not GPU and not isinstance(stored, list):  # fails closed: the interpreter's stores went unseen
        fail("the stores of your kernels could not be watched", called=call,
             got="no record of the stores (was triton's interpreter patched?)",
             expected="kernels run by the Triton interpreter as drill launched them")
    if stored:
        fail(f"your kernels stored into {', '.join(stored)}", called=call,
             got=f"stores into {', '.join(stored)}",
             expected="stores only into dq, dk, dv, delta and buffers of your own (within their size)",
             hint="never write into q, k, v, o, lse or do (read an lse of -inf as +inf inside the kernels "
                  "instead of fixing it in place), and never past the end of a buffer: p, dp and ds live in "
                  "registers, block by block, not in memory")
    if reply.grads is None:
        parts = seen.get("parts")
        fail(f"flash_attention_backward returned {seen.get('type', 'nothing')}, not three tensors (dq, dk, dv)",
             called=call, got=f"{seen.get('type')} {parts if parts else ''}".strip(),
             expected="a tuple (dq, dk, dv) of torch.Tensor, each [B, H, S, D]",
             hint="return dq, dk, dv from the launcher (the kernels write into them)")
    want_dtype = str(case.q.dtype).removeprefix("torch.")
    for name, part, arr in zip(NAMES, seen.get("parts") or [{}] * 3, reply.grads):
        if tuple(arr.shape) != tuple(case.q.shape):
            fail(f"{name} has the wrong shape", called=call, got=f"shape {tuple(arr.shape)}",
                 expected=f"shape {tuple(case.q.shape)}, the same as q")
        if isinstance(part, dict) and part.get("dtype") != want_dtype:
            fail(f"{name} has the wrong dtype", called=call, got=f"torch.{part.get('dtype')}",
                 expected=f"{case.q.dtype}, the dtype of q",
                 hint="allocate the gradients in q's dtype and store x.to(DX.dtype.element_ty) in the kernels")
        if isinstance(part, dict) and str(part.get("device", "")).split(":")[0] != case.q.device.type:
            fail(f"{name} is on the wrong device", called=call, got=str(part.get("device")),
                 expected=str(case.q.device))
    return [torch.from_numpy(a).double() for a in reply.grads]


def _row_text(t, idx, cols=4):
    b, h, i = idx
    vals = ", ".join(f"{float(x):.5g}" for x in t[b, h, i, :cols])
    return f"[{b}, {h}, {i}, :{cols}] = [{vals}{', …' if t.shape[-1] > cols else ''}]"


def _worst(got, want):
    diff = (got - want).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    flat = int(diff.reshape(-1).argmax())
    B, H, S, D = want.shape
    return flat // (H * S * D), flat // (S * D) % H, flat // D % S


def reads_past_end(sub, case: Case) -> bool:
    """True if the NaN goes away when the memory after the inputs holds zeros instead of NaN."""
    try:
        reply = call_user(sub, case, guard=0.0)
        return reply.grads is not None and not any(bool(np.isnan(a).any()) for a in reply.grads)
    except Exception:  # noqa: BLE001 - a second failure says nothing more
        return False


def diagnose(sub, case: Case, got, ref, tols, wrong: list[int], extra=None) -> str:
    for i in wrong:
        never = unwritten(got[i], NAMES[i])
        if never:
            return never
    hint = name_mistake(case, got, wrong, [t for t, _ in tols])
    if hint:
        return hint
    for i in wrong:
        hint = tf.wrong_head(got[i], ref[i], tols[i][0], "gradient",
                             "; each input's head starts at b·stride_b + h·stride_h, each output's at (b·H + h)·S·D")
        if hint:
            return hint
    if extra is not None:
        hint = extra()
        if hint:
            return hint
    if any(bool(torch.isnan(got[i]).any()) for i in wrong):
        if reads_past_end(sub, case):
            return ("rows past S were loaded without a mask: drill keeps NaN in the memory after every input, and "
                    "your gradients picked it up; load with mask=rows[:, None] < S, other=0.0")
        return "a gradient holds NaN: exp(s − lse) with lse = -inf is inf, and inf · 0 is NaN"
    if any(bool(torch.isinf(got[i]).any()) for i in wrong):
        return "a gradient holds inf: rebuild p as exp(s − lse), never exp(s) / exp(lse)"
    return ""


def _inputs_unchanged(reply: Reply, case: Case, before) -> None:
    after = reply.inputs_after or []
    for name, t0, a in zip(("q", "k", "v", "o", "lse", "do"), before, after + [None] * (6 - len(after))):
        if a is None or not np.array_equal(a, t0, equal_nan=True):
            fail(f"flash_attention_backward changed its input {name} in place", called=case.describe(),
                 hint="write only into fresh dq, dk, dv and delta; read an lse of -inf as +inf inside the kernels "
                      "rather than rewriting lse (or any other input)")


def _kernels_did_it(reply: Reply, call: str) -> None:
    """Every call, not only test_launches': a launcher that computes with torch on some options (not
    causal, an explicit sm_scale, rows with lse = -inf) and launches its kernels on others must fail."""
    if not any(launch.mine for launch in reply.launches):
        fail("no @triton.jit kernel from your file was launched", called=call,
             expected="_bwd_preprocess, _bwd_dkdv_kernel and _bwd_dq_kernel launched from your file",
             hint="the exercise is the kernels: compute D, dk, dv and dq inside your @triton.jit functions on "
                  "every call, whatever causal, sm_scale and the shapes are")
    tf.check_no_torch_compute(reply.observed, call, "the gradients")


def check_case(sub, case: Case, extra=None):
    """Call the user's backward on one case and fail with a diagnosis unless dq, dk, dv are right."""
    ref = reference(case)  # computed first: a kernel that writes into its inputs must not move it
    tols = tolerances(case, ref)
    keep = Case(*(t.clone() for t in case.tensors()), case.causal, case.sm_scale, case.empty_rows)
    before = [tf.values(t) for t in case.tensors()]
    reply = call_user(sub, case, return_inputs=True)
    got = as_grads(reply, case)
    _inputs_unchanged(reply, case, before)
    _kernels_did_it(reply, case.describe())
    errors = [max_error(g.numpy(), r.cpu().numpy()) for g, r in zip(got, ref)]
    wrong = [i for i, (e, (t, _)) in enumerate(zip(errors, tols)) if e > t]
    if not wrong:
        return got, reply
    ref = [r.cpu() for r in ref]
    hint = diagnose(sub, keep, got, ref, tols, wrong, extra)
    i = wrong[0]
    idx = _worst(got[i], ref[i])
    others = f" (also wrong: {', '.join(NAMES[j] for j in wrong[1:])})" if len(wrong) > 1 else ""
    fail(f"{NAMES[i]} is wrong (largest error {errors[i]:.3g}, allowed {tols[i][0]:.3g} = max(2 × naive "
         f"attention's error {tols[i][1]:.3g}, a floor)){others}", called=case.describe(),
         got=f"{NAMES[i]}{_row_text(got[i], idx)}", expected=f"{NAMES[i]}{_row_text(ref[i], idx)}", hint=hint)


# --------------------------------------------------------------------------- the checks


def test_single_head(sub, mode):
    """One head, a short sequence: dq, dk, dv match autograd"""
    check_case(sub, make_case(1, 1, *pick((16, 16), (64, 64)), mode, seed=1))


def test_many_blocks(sub, mode):
    """Many query and key blocks: every block pair adds its part"""
    B, H, S, D = pick((1, 1, 96, 16), (1, 2, 1024, 64))
    check_case(sub, make_case(B, H, S, D, mode, seed=2, scale=1.5))


@pytest.mark.parametrize("S", pick((1, 17, 45), (1, 100, 1000, 1537)), ids=lambda s: f"S={s}")
def test_ragged_lengths(sub, mode, S):
    """Ragged S, not a multiple of the block sizes"""
    check_case(sub, make_case(1, 2, S, pick(16, 64), mode, seed=3 + S))


@pytest.mark.parametrize("D", pick((32, 64), (16, 32, 128)), ids=lambda d: f"D={d}")
def test_head_dims(sub, mode, D):
    """Head dims other than the usual one"""
    check_case(sub, make_case(1, 1, pick(24, 300), D, mode, seed=4 + D))


def _strides_hint(sub, case: Case):
    def hint():
        flat = tuple(tf.guarded(t.contiguous(), math.nan) for t in case.tensors())
        plain = Case(*flat, case.causal, case.sm_scale, case.empty_rows)
        ref = reference(plain)
        tols = tolerances(plain, ref)
        try:
            reply = call_user(sub, plain)
        except Exception:  # noqa: BLE001 - failing here too says nothing about strides
            return ""
        if reply.grads is not None and all(a.shape == tuple(r.shape) and max_error(a.astype(np.float64), r.cpu().numpy())
                                           <= t for a, r, (t, _) in zip(reply.grads, ref, tols)):
            return ("right for contiguous inputs but wrong for these: use each input's own strides (q, k, v, o, do "
                    "and lse each have theirs); a head starts at b·stride_b + h·stride_h, row i at + i·stride_s")
        return ""

    return hint


def test_batches_heads_strides(sub, mode):
    """Several batches and heads, with non-contiguous q, k, v, o, do and lse"""
    B, H, S, D = pick((2, 3, 20, 16), (2, 3, 700, 64))
    case = make_case(B, H, S, D, mode, seed=5, layout="strided")
    check_case(sub, case, extra=_strides_hint(sub, case))


@pytest.mark.parametrize("S", pick((16, 45), (128, 1000)), ids=lambda s: f"S={s}")
def test_causal(sub, mode, S):
    """Causal: query i sees keys j <= i, in both kernels"""
    check_case(sub, make_case(1, 2, S, pick(16, 64), mode, seed=6 + S, causal=True))


def test_sm_scale(sub, mode):
    """An explicit sm_scale is used in the recomputed scores and in dq, dk (0.0 included)"""
    B, H, S, D = pick((1, 1, 40, 16), (1, 2, 500, 64))
    for causal in (False, True):
        check_case(sub, make_case(B, H, S, D, mode, seed=7, causal=causal, sm_scale=0.3))
    # 0.0 is a scale like any other (every p row uniform over the keys it sees, dq = dk = 0), not
    # "use the default": `sm_scale or 1/√D` turns it into 1/√D.
    for causal in (False, True):
        check_case(sub, make_case(B, H, S, D, mode, seed=17, causal=causal, sm_scale=0.0))


@pytest.mark.parametrize("kind", ["spread", "negative"], ids=["scores in the hundreds", "scores near -600"])
def test_large_logits(sub, mode, kind):
    """Large logits: p is rebuilt from lse without overflow"""
    B, H, S, D = pick((1, 1, 40, 16), (1, 1, 512, 64))
    if kind == "spread":
        case = make_case(B, H, S, D, mode, seed=8, scale=8.0)
    else:
        case = make_case(B, H, S, D, mode, seed=9, shift_logits=-600.0)

    def hint():
        return ("p must come from the saved lse, p = exp(s − lse), which is at most 1 whatever the scores: "
                "exp(s) alone over- or underflows at these scores")

    check_case(sub, case, extra=hint)


@pytest.mark.parametrize("causal", [False, True], ids=["not causal", "causal"])
def test_rows_that_saw_no_key(sub, mode, causal):
    """Rows that saw no key (lse = -inf, o = 0) get dq = 0 and add nothing to dk, dv"""
    B, H, S, D = pick((1, 2, 24, 16), (1, 2, 300, 64))
    empty = (0, 5, S - 1)
    case = make_case(B, H, S, D, mode, seed=10 + causal, causal=causal, empty_rows=empty)

    def hint():
        return ("a row whose lse is -inf saw no key: its p row must be 0, but exp(s − (−inf)) is inf; read such an "
                "lse as +inf (tl.where(lse == float('-inf'), float('inf'), lse)) so that exp(s − lse) = 0")

    check_case(sub, case, extra=hint)


@pytest.mark.observed
def test_returns_new_tensors_inputs_unchanged(sub, mode):
    """Returns new dq, dk, dv and leaves every input unchanged"""
    B, H, S, D = pick((2, 1, 20, 16), (2, 1, 100, 64))
    case = make_case(B, H, S, D, mode, seed=12, sm_scale=0.5)
    before = [tf.values(t) for t in case.tensors()]
    ref = reference(case)
    tols = tolerances(case, ref)
    reply = call_user(sub, case, return_inputs=True)
    got = as_grads(reply, case)
    after = reply.inputs_after or []
    for name, t0, a in zip(("q", "k", "v", "o", "lse", "do"), before, after + [None] * (6 - len(after))):
        if a is None or not np.array_equal(a, t0, equal_nan=True):
            fail(f"flash_attention_backward changed its input {name} in place", called=case.describe(),
                 hint="scale the scores inside the kernels, write only into fresh dq, dk, dv and delta; never into "
                      "q, k, v, o, lse or do")
    shared = reply.observed.get("shares")
    if not isinstance(shared, list) or shared:
        fail(f"{', '.join(shared) if isinstance(shared, list) else 'a gradient'} shares its memory with an input",
             called=case.describe(), hint="allocate fresh outputs, torch.empty((B, H, S, D), ...)")
    for i, (g, r, (tol, naive_err)) in enumerate(zip(got, ref, tols)):
        err = max_error(g.numpy(), r.cpu().numpy())
        if err > tol:
            fail(f"{NAMES[i]} is wrong (largest error {err:.3g}, allowed {tol:.3g})", called=case.describe())


# The most of a head's tl.dot work (its share of the launch's M·N·K) one program may do in
# test_launches: one program per head walking the sequence does all of it (beside idle or decoy
# programs, a hair less); an honest tiled backward's busiest program does at most 3/4 there.
SERIAL_SHARE = 0.875

@pytest.mark.observed
def test_launches(sub, mode):
    """Your @triton.jit kernels do the work in blocks, not torch operations"""
    # S above 128, the largest block test_scores_stay_on_chip allows: any honest block size then
    # cuts the sequence into more than one block, under the interpreter too. 192 = 1.5 × 128 and a
    # multiple of 64: with 128-row key blocks and the causal query loop started at the diagonal,
    # the first key block's program does 3/4 of its head's dot work (192 query rows against 64),
    # whatever BLOCK_M, well under the SERIAL_SHARE that one program walking a head reaches.
    B, H, S, D = pick((2, 2, 192, 16), (2, 3, 300, 64))
    case = make_case(B, H, S, D, mode, seed=13, causal=True)
    call = case.describe()
    reply = call_user(sub, case)
    mine = [launch for launch in reply.launches if launch.mine]
    if not mine:  # fails closed: no launch seen from the user's file, whatever the reason, is no pass
        others = ", ".join(sorted({f"{launch.kernel} ({launch.file})" for launch in reply.launches}))
        fail("no @triton.jit kernel from your file was launched", called=call,
             got=(f"launches: {others}" if others else "no Triton launch at all" if reply.launches.watching
                  else "no Triton launch could be watched (was triton's JITFunction.run replaced?)"),
             expected="_bwd_preprocess, _bwd_dkdv_kernel and _bwd_dq_kernel launched from your file",
             hint="the exercise is the kernels: compute D, dk, dv and dq inside your @triton.jit functions, not "
                  "with torch operations, torch.autograd or another module's kernel")
    tf.check_no_torch_compute(reply.observed, call, "the gradients")
    heads = [launch for launch in mine if launch.grid and B * H in launch.grid]
    if not heads:
        fail("no launch of your kernels runs over all B·H heads", called=call,
             got="grids " + ", ".join(str(list(launch.grid)) for launch in mine if launch.grid),
             expected=f"grids (blocks, B·H) = (…, {B * H})",
             hint="one program per (block, batch·head): grid = (triton.cdiv(S, BLOCK), B * H)")
    # Tiled means several programs along the sequence: one program holding a whole head would build
    # S×S tiles, which no GPU's on-chip memory holds at real lengths.
    if not any(math.prod(launch.grid) > B * H for launch in heads):
        fail(f"every launch of your kernels runs one program per head: the S = {S} rows are not cut into blocks",
             called=call, got="grids " + ", ".join(str(list(launch.grid)) for launch in heads),
             expected=f"grids (triton.cdiv(S, BLOCK), B·H) with BLOCK < S, so more than {B * H} programs",
             hint="give each program one block of BLOCK_M queries (dq) or BLOCK_N keys (dk, dv) and loop over the "
                  "other side in blocks: BLOCK below S, grid = (triton.cdiv(S, BLOCK), B * H)")
    # Under the interpreter, every launch whose programs call tl.dot (those that build score blocks)
    # must cut S into blocks too: a tiled decoy beside one program per head walking the whole
    # sequence does not count.
    dots = reply.observed.get("dot_launches")
    if not mode.gpu and not isinstance(dots, list):
        fail("the launches of your kernels could not be watched", called=call,
             got="no record of which launches compute (was triton's interpreter patched?)",
             expected="kernels run by the Triton interpreter as drill launched them")
    hint = ("give each program one block of BLOCK_N keys (dk, dv) or BLOCK_M queries (dq): the blocks of a head "
            "are worked on side by side, not one after another by a single program")
    for launch in dots or []:
        programs = launch.get("programs") if isinstance(launch, dict) else None
        if not isinstance(programs, int) or programs <= B * H:
            fail(f"a kernel of yours that computes scores runs {programs} program(s) for {B * H} heads: one program "
                 "walks a whole head", called=call, got=f"a launch with tl.dot over {programs} programs",
                 expected=f"the dK/dV and dQ kernels over (triton.cdiv(S, BLOCK), B·H) grids, more than {B * H} "
                          "programs", hint=hint)
    # The grid is not the work: programs that return at once, or call one decoy tl.dot, make a
    # wide grid of one program per head walking the whole sequence. So each program's own dot work
    # (M·N·K of its tl.dot calls, placed by the interpreter's grid index) is measured against a
    # head's share of its launch's work: a tiled kernel spreads a head over its blocks' programs.
    for launch in dots or []:
        total, largest = launch.get("total"), launch.get("largest")
        if not (isinstance(total, int) and isinstance(largest, int) and total > 0 and largest >= 0):
            fail("the work of your kernels' programs could not be told apart", called=call,
                 got="no per-program record of tl.dot (was triton's interpreter patched, or has it no grid index?)",
                 expected="kernels run by the Triton interpreter as drill launched them")
        share = largest * B * H / total
        if share > SERIAL_SHARE:
            fail(f"one program of a kernel of yours did {share:.1%} of a head's tl.dot work: it walks the whole head "
                 "while the launch's other programs do (next to) nothing", called=call,
                 got=f"a launch over {launch['programs']} programs, {launch.get('working')} of them calling tl.dot; "
                     f"its busiest program's M·N·K was {largest}, a head's share of the launch's {total} is "
                     f"{total / (B * H):.0f}",
                 expected=f"no program above {SERIAL_SHARE:.0%} of a head's share (a tiled backward's busiest, the "
                          "first key block of a causal head, does about 3/4 of it here with 128-row blocks)",
                 hint=hint)
    ref = reference(case)
    tols = tolerances(case, ref)
    got = as_grads(reply, case)
    for i, (g, r, (tol, _)) in enumerate(zip(got, ref, tols)):
        err = max_error(g.numpy(), r.cpu().numpy())
        if err > tol:
            fail(f"{NAMES[i]} is wrong (largest error {err:.3g}, allowed {tol:.3g})", called=call)


# One head long enough that its S×S scores dwarf every buffer a FlashAttention backward needs.
ON_CHIP_CASE = pick((1, 1, 384, 16), (1, 1, 4096, 64))
# The largest block a program may build: 128 × 128 elements, the largest tile any GPU backward
# uses (the interpreter's launcher uses 16 and 32); a head's scores at ON_CHIP_CASE are S × S.
MAX_BLOCK = 128 * 128


@pytest.mark.observed
def test_scores_stay_on_chip(sub, mode):
    """Scores are rebuilt block by block: no program holds, and no buffer keeps, a head's S×S matrix"""
    B, H, S, D = ON_CHIP_CASE
    case = make_case(B, H, S, D, mode, seed=14)
    call = case.describe()
    _, reply = check_case(sub, case)
    seen = reply.observed
    block = seen.get("largest_block")
    if not mode.gpu and not isinstance(block, int):  # fails closed: the interpreter's blocks went unseen
        fail("the blocks your kernels build could not be watched", called=call,
             got="no record of the blocks (was triton's interpreter patched?)",
             expected="kernels run by the Triton interpreter as drill launched them")
    if isinstance(block, int) and block > MAX_BLOCK:
        fail(f"one of your programs built a block of {block} elements; a head's scores here are "
             f"{S}×{S} = {S * S}", called=call,
             got=f"a block of {block} elements", expected=f"blocks of at most {MAX_BLOCK} elements (128 × 128)",
             hint="no program holds a whole head: each takes one block of BLOCK_M queries or BLOCK_N keys and "
                  "loops over the other side in blocks, grid = (triton.cdiv(S, BLOCK), B * H)")
    scratch = seen.get("scratch_bytes")
    # Room for four fp32 [B, H, S, D] buffers (dq added atomically, fp32 dk and dv, a spare copy)
    # and four fp32 [B, H, S] (delta, a copy of lse, ...); one byte per score of one head is S/D
    # times more than a [S, D] buffer.
    allowed = 4 * (B * H * S * D * 4) + 4 * (B * H * S * 4)
    if not isinstance(scratch, int) or scratch > allowed:
        fail("your kernels keep the scores in memory: the buffers they were given besides q, k, v, o, lse, do "
             f"and the outputs hold {scratch if isinstance(scratch, int) else '(not recorded)'} bytes",
             called=call, got=f"{scratch} bytes of extra buffers",
             expected=f"at most {allowed} bytes (delta and fp32 accumulators); the {S}×{S} scores of a head need "
                      f"{S * S} bytes even in one byte each",
             hint="recompute p = exp(q kᵀ · sm_scale − lse) block by block inside each kernel and never store p, "
                  "dp or ds: the dK/dV kernel and the dQ kernel each rebuild the blocks they need")


# --------------------------------------------------------------------------- GPU only

# Long enough that each dK/dV program sums 64-128 query blocks: a gradient accumulated in fp16/bf16
# (rounded after every block) drifts well past twice naive attention's error there.
ACCURACY_CASES = [(1, 2, 4096, 64, False), (1, 2, 2049, 128, True)]
# One long sequence, one head: the work grows with S², the three gradients sent back with S
# (8 MB each at S = 64k, D = 64), so the kernel's time stands out of the transfer.
SPEED_CASES = [(1, 1, 65536, 64, False), (1, 1, 65536, 128, False), (1, 1, 65536, 128, True)]
SPEED_DTYPE = torch.bfloat16
TIMED_CALLS = 7  # per size, after one untimed call; each on fresh inputs, each output checked
# Of the reference backward's TFLOP/s, at every size. Low on purpose: FA2's one-pass backward, dQ
# added with fp32 atomics, is right and ran 0.07-0.11x the reference on an H200; fp32 dots on
# 16-row blocks, the tensor cores idle, ran 0.01-0.02x (BENCHMARKS.md).
MIN_SPEED_RATIO = 0.05
NULL_KERNEL = Path(__file__).with_name("_triton_null_backward.py")


def _reference_kernel():
    # The default launch config, no tuning (tuning compiles several configs per shape).
    os.environ["DRILL_FLASH_TUNE"] = "0"
    from drill.kernels import flash_attention

    return flash_attention


def _reference_grads(fn, q, k, v, do, causal, **kw):
    with torch.enable_grad():
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o = fn(qq, kk, vv, causal=causal, **kw)
        return torch.autograd.grad(o, (qq, kk, vv), do)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_accuracy(sub, mode, dtype):
    """Low precision: error at most twice naive attention's, beside the reference backward"""
    if not mode.gpu:
        pytest.skip(f"{dtype} accuracy not measured: no CUDA GPU here; the Triton interpreter "
                    "checks small fp32 shapes only")
    torch_dtype = getattr(torch, dtype)
    reference_kernel = _reference_kernel()
    for B, H, S, D, causal in ACCURACY_CASES:
        case = make_case(B, H, S, D, mode, seed=20 + S, causal=causal, dtype=torch_dtype)
        ref = reference(case)
        tols = tolerances(case, ref)
        theirs = _reference_grads(reference_kernel, case.q, case.k, case.v, case.do, causal)
        ref_err = [float((t.double() - r).abs().max()) for t, r in zip(theirs, ref)]
        reply = call_user(sub, case)
        got = as_grads(reply, case)
        ref = [r.cpu() for r in ref]
        errs = [max_error(g.numpy(), r.numpy()) for g, r in zip(got, ref)]
        note(f"{dtype} B={B} H={H} S={S} D={D}{' causal' if causal else ''}: max error vs float64 (dq, dk, dv) "
             f"yours {', '.join(f'{e:.3g}' for e in errs)}; reference backward "
             f"{', '.join(f'{e:.3g}' for e in ref_err)}; naive {dtype} autograd {', '.join(f'{n:.3g}' for _, n in tols)}")
        wrong = [i for i, (e, (t, _)) in enumerate(zip(errs, tols)) if e > t]
        if wrong:
            i = wrong[0]
            idx = _worst(got[i], ref[i])
            hint = diagnose(sub, case, got, ref, tols, wrong) or (
                "keep dk, dv, dq and D in fp32 and load lse as fp32; cast only p and ds to the input dtype for "
                "tl.dot, and store each gradient once, at the end")
            fail(f"{NAMES[i]} is wrong in {dtype} (largest error {errs[i]:.3g}, allowed {tols[i][0]:.3g} = "
                 f"max(2 × naive attention's error {tols[i][1]:.3g}, a floor); reference backward's error "
                 f"{ref_err[i]:.3g})", called=case.describe(),
                 got=f"{NAMES[i]}{_row_text(got[i], idx)}", expected=f"{NAMES[i]}{_row_text(ref[i], idx)}", hint=hint)


def _sdpa_backend(backend):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def _time_backward(fn, q, k, v, do, causal):
    """do_bench median ms of the backward alone (one graph kept, grad taken again and again); None if
    the backend cannot run this shape."""
    try:
        with torch.enable_grad():
            qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
            o = fn(qq, kk, vv, causal)

            def step():
                torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)

            step()
            torch.cuda.synchronize()
            return tf.median_ms(step)
    except Exception:  # noqa: BLE001 - a backend that does not support this shape or GPU
        return None


def backward_tflops(B, H, S, D, causal, ms):
    return 2.5 * tf.tflops(B, H, S, D, causal, ms)


def _round_trips(proxy, shape, causal, seeds, check=None) -> float:
    spec = {"shape": list(shape), "dtype": str(SPEED_DTYPE).removeprefix("torch."), "device": "cuda",
            "causal": bool(causal)}
    kwargs = {"causal": True} if causal else {}

    def call(seed):
        return proxy.flash_attention_backward.observe(
            helper={"module": PROBE.stem, "entry": "seeded", "spec": dict(spec, seed=int(seed))}, **kwargs)

    return roundtrip.timed_round_trips(call, list(seeds), check)


def _null_subject(sub):
    from drill.grader.proxy import SubmissionProxy

    proxy = SubmissionProxy(roundtrip.calibration_subject(sub._subject, NULL_KERNEL, ["flash_attention_backward"]))
    for helper in HELPERS:
        proxy.use_helper(helper)
    return proxy


def test_speed(sub, mode):
    """Speed against the reference backward and SDPA"""
    if not mode.gpu:
        note("graded under the Triton interpreter on small fp32 shapes: correctness only")
        pytest.skip("speed not measured: no CUDA GPU here; the Triton interpreter checks correctness only")
    from torch.nn.attention import SDPBackend

    from . import _triton_bwd_probe as probe

    reference_kernel = _reference_kernel()
    others = [("reference", lambda q, k, v, c: reference_kernel(q, k, v, causal=c)),
              ("SDPA cuDNN", _sdpa_backend(SDPBackend.CUDNN_ATTENTION)),
              ("SDPA FLASH", _sdpa_backend(SDPBackend.FLASH_ATTENTION))]
    dtype = str(SPEED_DTYPE).removeprefix("torch.")
    for helper in HELPERS:
        sub.use_helper(helper)
    note(f"speed, {dtype}, backward TFLOP/s (2.5 × the forward's 4·B·H·S²·D, half when causal). yours: the median "
         f"wall-clock round trip of {TIMED_CALLS} calls into the sandboxed process running your file (each on fresh "
         "q, k, v, do drawn there from a seed it cannot predict, o and lse from PyTorch's FlashAttention-2 forward, "
         "each output checked), minus the median round trip of a backward that computes nothing through the same "
         "path (the transfer and the forward, calibrated in a clean process); the others: do_bench medians of "
         "the backward alone in the grader. reference = drill.kernels.flash_attention's backward (default "
         "config); SDPA backends pinned with sdpa_kernel")
    note("B H S D causal | yours | " + " | ".join(n for n, _ in others) + " | yours/reference | yours/SDPA cuDNN")
    from drill.kernels.benchmarks import speed_of_light as sol

    ceilings = sol.ceilings()
    note("ceilings measured in this run: " + ceilings.describe())
    slow, impossible = [], []
    judged = 0  # rows out of the transfer's noise
    calibration = _null_subject(sub)
    try:
        for B, H, S, D, causal in SPEED_CASES:
            shape = (B, H, S, D)
            what = (f"flash_attention_backward on [{B}, {H}, {S}, {D}] {dtype}{', causal=True' if causal else ''} "
                    "(speed size, inputs drawn in your process from a seed)")

            def check(seed, outcome, shape=shape, causal=causal, what=what):
                seen = outcome.extra.get("observed") or {}
                got = outcome.result
                if not (isinstance(got, list) and len(got) == 3 and all(isinstance(a, np.ndarray) for a in got)):
                    fail(f"{what} must return three {dtype} tensors (dq, dk, dv) shaped like q", called=what,
                         got=f"{seen.get('type')} {seen.get('parts', '')}".strip())
                q, k, v, o, lse, do = probe.seeded_inputs(shape, SPEED_DTYPE, seed, "cuda", causal)
                want = _reference_grads(reference_kernel, q, k, v, do, causal)
                for name, g, w in zip(NAMES, got, want):
                    mine = torch.from_numpy(g).cuda().view(SPEED_DTYPE).double()
                    w = w.double()
                    err = float((mine - w).abs().max())
                    tol = 5e-2 * float(w.abs().max()) + 1e-6  # relative: these gradients are far below 1
                    if not err <= tol:
                        fail(f"{name} is wrong at the speed size (largest error {err:.3g} against the reference "
                             f"backward, allowed {tol:.3g})", called=what)

            seeds = roundtrip.fresh_seeds(TIMED_CALLS + 1)  # the first is the warm-up
            # Nothing of your file runs while the transfer or the references are timed.
            sub._subject.close()
            _round_trips(calibration, shape, causal, seeds[:1])
            transfer = _round_trips(calibration, shape, causal, seeds[1:])
            calibration._subject.close()
            q, k, v, o, lse, do = probe.seeded_inputs(shape, SPEED_DTYPE, seeds[0], "cuda", causal)
            figures = {"yours": None}
            for name, fn in others:
                figures[name] = _time_backward(fn, q, k, v, do, causal)
            del q, k, v, o, lse, do
            torch.cuda.empty_cache()
            _round_trips(sub, shape, causal, seeds[:1], check)
            round_trip = _round_trips(sub, shape, causal, seeds[1:], check)
            sub._subject.close()
            figures["yours"] = max(round_trip - transfer, 1e-3)
            rate = {n: backward_tflops(B, H, S, D, causal, ms) if ms else None for n, ms in figures.items()}
            in_noise = roundtrip.within_noise(round_trip, transfer)
            if in_noise:  # no figure of yours to show or compare
                rate["yours"] = None

            def ratio(a, b):
                return f"{rate[a] / rate[b]:.2f}" if rate[a] and rate[b] else "n/a"

            cells = " | ".join(f"{rate[n]:.3g}" if rate[n] else ("in noise" if n == "yours" else "n/a")
                               for n in figures)
            note(f"{B} {H} {S} {D} {'yes' if causal else 'no'} | {cells} | {ratio('yours', 'reference')} | "
                 f"{ratio('yours', 'SDPA cuDNN')}")
            note(f"  round trip {round_trip:.3g} ms, of which transfer and forward {transfer:.3g} ms (calibrated)")
            light, too_fast = sol.check_row(ceilings, figures, shape, causal, yours_judged=not in_noise, backward=True)
            if light:
                note(light)
            if in_noise:
                note("  (transfer dominates the round trip: this row's figure is not reliable and is not judged)")
                continue
            judged += 1
            if too_fast:
                impossible.append(too_fast)
                continue
            if rate["yours"] and rate["reference"] and rate["yours"] < MIN_SPEED_RATIO * rate["reference"]:
                slow.append(f"B={B} H={H} S={S} D={D}{' causal' if causal else ''}: yours {rate['yours']:.3g}, "
                            f"reference {rate['reference']:.3g} TFLOP/s")
    finally:
        calibration._subject.close()
    roundtrip.require_judged(judged)
    if impossible:
        fail("your backward was timed faster than this GPU's speed of light: a measurement error or a forged "
             "timing, never a pass", called=f"flash_attention_backward on {dtype} inputs at the sizes below",
             got="; ".join(impossible), expected="no faster than the largest of the matmul, exp and HBM floors")
    if slow:
        fail(f"your backward runs below {MIN_SPEED_RATIO:g}× the reference backward's TFLOP/s",
             called=f"flash_attention_backward on {dtype} inputs at the sizes in the table below",
             got="; ".join(slow), expected=f"at least {MIN_SPEED_RATIO:g}× the reference at every size",
             hint="keep q, k, v, do in fp16/bf16 for tl.dot (fp32 operands leave the tensor cores idle), cast p and "
                  "ds to the input dtype before their matmuls, use blocks of 32-128 rows, and launch one program "
                  "per (block, batch·head), not one kernel per head")
