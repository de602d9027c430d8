"""Support for the triton-forward checks (trusted side): where the kernel runs, inputs,
float64 references, known mistakes, calling the user's kernel in the subject, and timing.

The user's kernel runs only in the sandboxed subject. `call_user` sends q, k and v by
value with the layout to rebuild (strides, dtype, device, what the guard memory after
each holds); _triton_probe.py, copied beside the subject, rebuilds them there, runs the
kernel with poisoned allocations and launches recorded, and sends back the output values
and what it saw. Those observations come from the user's process: they may fail a check,
never pass one. Values are compared here, against references computed here.

Not collected by pytest (leading underscore). The references build full S×S score
matrices on purpose: they are the yardstick, not an answer to copy.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from drill.grader import fixtures, roundtrip, submission
from drill.grader.expect import fail, max_error

PROBE = Path(__file__).with_name("_triton_probe.py")

# Every output element is a weighted mean of rows of v, so |o| <= max|v| (a few units here):
# this value can never be a real output, and it is exact in fp16, bf16 and fp32.
POISON = -32768.0
# Guard elements after each tensor made here (the subject's copies get a guard of their own).
GUARD = 1 << 10
BLOCK_CANDIDATES = (16, 32, 64, 128)  # key block sizes a kernel might use, for naming mistakes
# Smallest tolerance, times max(1, max|expected|): a few units of the dtype's rounding.
FLOOR = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


# --------------------------------------------------------------------------- where it runs


def interpreter_on() -> bool:
    """Whether the subject runs Triton's interpreter (drill's runner sets it there when it finds no GPU)."""
    try:
        env = submission.loaded()._subject.env
    except (RuntimeError, AttributeError):
        env = {}
    flag = env.get("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    return flag not in ("", "0")


@dataclass(frozen=True)
class Mode:
    """How this run grades: under the interpreter (CPU, fp32) or on a CUDA GPU (fp16)."""

    name: str  # "interpreter" | "gpu"
    device: str
    dtype: torch.dtype

    @property
    def gpu(self) -> bool:
        return self.name == "gpu"


def current_mode() -> Mode | None:
    # The interpreter wins when it is on: it runs on CPU tensors even on a GPU machine.
    if interpreter_on():
        return Mode("interpreter", "cpu", torch.float32)
    if torch.cuda.is_available():
        return Mode("gpu", "cuda", torch.float16)
    return None


NO_MODE = ("no CUDA GPU here and the Triton interpreter is off, so the kernel cannot run: "
           "drill sets TRITON_INTERPRET=1 when it finds no nvidia-smi; on a machine with "
           "nvidia-smi but no CUDA build of torch, run with TRITON_INTERPRET=1 in the environment")


# --------------------------------------------------------------------------- inputs


def make_qkv(B, H, S, D, mode: Mode, *, seed: int, scale: float = 1.0, layout: str = "contiguous",
             dtype: torch.dtype | None = None):
    """q, k, v [B, H, S, D] drawn from N(0, scale²) on the mode's device.

    layout="strided" gives each tensor a layout of its own, as in a real model:
      q  a transposed view of a [B, S, H, D] projection (head stride D, row stride H·D)
      k  contiguous [B, H, S, D]
      v  the second half of a packed [B, H, S, 2D] key-value tensor (row stride 2D)
    """
    dtype = dtype or mode.dtype
    gen = torch.Generator().manual_seed(fixtures.seed(seed))  # stream `seed` of the run's secret seed

    def draw(*shape):
        values = (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)
        return guarded(values.to(mode.device), math.nan)

    if layout == "contiguous":
        return draw(B, H, S, D), draw(B, H, S, D), draw(B, H, S, D)
    q = draw(B, S, H, D).transpose(1, 2)
    k = draw(B, H, S, D)
    v = draw(B, H, S, 2 * D)[..., D:]
    return q, k, v


def guarded(t: torch.Tensor, fill: float) -> torch.Tensor:
    """A copy of t (same shape and strides) followed by GUARD elements of `fill` in memory.

    NaN after the inputs turns a load past S without a mask into a visible NaN; POISON
    after an output buffer shows a store past S (see _triton_probe.py).
    """
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) if t.numel() else 0
    buf = torch.full((span + GUARD,), fill, dtype=t.dtype, device=t.device)
    out = buf.as_strided(tuple(t.shape), tuple(t.stride()))
    out.copy_(t)
    return out


def describe(q, causal, sm_scale) -> str:
    B, H, S, D = q.shape
    layout = "" if q.is_contiguous() else ", non-contiguous q, k, v"
    scale = "" if sm_scale is None else f", sm_scale={sm_scale:g}"
    return (f"flash_attention(q, k, v{', causal=True' if causal else ''}{scale}) with "
            f"B={B}, H={H}, S={S}, D={D}, {str(q.dtype).removeprefix('torch.')}{layout}")


# --------------------------------------------------------------------------- references


def default_scale(D: int, sm_scale) -> float:
    return 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)


def causal_keep(S: int, device, shift: int = 0) -> torch.Tensor:
    """[S, S] bool: query i sees key j iff j <= i + shift (shift 0 is the contract)."""
    i = torch.arange(S, device=device)
    return i[None, :] <= i[:, None] + shift


def attention64(q, k, v, scale: float, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Float64 softmax(q kᵀ · scale) v; `keep` masks scores to -inf. Rows seeing no key give NaN."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf)
    return torch.softmax(s, dim=-1) @ v.double()


def reference(q, k, v, causal: bool, sm_scale) -> torch.Tensor:
    S, D = q.shape[2], q.shape[3]
    return attention64(q, k, v, default_scale(D, sm_scale), causal_keep(S, q.device) if causal else None)


def naive_low_precision(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """Attention as three plain torch ops in the inputs' own dtype: the accuracy yardstick."""
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_keep(q.shape[2], q.device), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def tolerance(q, k, v, causal: bool, sm_scale, ref: torch.Tensor) -> tuple[float, float]:
    """(allowed error, naive attention's error): twice naive's error in the same dtype, with a floor."""
    scale = default_scale(q.shape[3], sm_scale)
    naive = naive_low_precision(q, k, v, causal, scale)
    naive_err = float((naive.double() - ref).abs().max())
    floor = FLOOR.get(q.dtype, 2e-5) * max(1.0, float(ref.abs().max()))
    # An error model, not one implementation's error: a kernel that tracks the logsumexp rather
    # than the running sum computes p = exp(s - lse), and lse itself carries a rounding of about
    # |lse|·eps; every p, so every output, moves by that relative amount (times |v|). At scores
    # near -600 in fp32 that is ~1e-4, above twice the naive kernel's error.
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        S = q.shape[2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    lse_max = float(lse[torch.isfinite(lse)].abs().max()) if bool(torch.isfinite(lse).any()) else 0.0
    lse_term = LSE_ULPS * lse_max * torch.finfo(q.dtype).eps * max(1.0, float(v.double().abs().max()))
    if not math.isfinite(naive_err):
        return floor + lse_term, naive_err
    return max(2.0 * naive_err, floor) + lse_term, naive_err


LSE_ULPS = 4.0  # units of |lse|·eps allowed: exp's and the subtraction's rounding, with room


def streamed(q, k, v, scale: float, keep, block: int, *, rescale_acc=True, rescale_l=True,
             inverted=False, divide=True) -> torch.Tensor:
    """Online softmax over key blocks of `block`, with optional known mistakes (float64)."""
    s_all = (q.double() @ k.double().transpose(-1, -2)) * scale
    if keep is not None:
        s_all = s_all.masked_fill(~keep, -math.inf)
    vd = v.double()
    shape = s_all.shape[:-1]
    m = torch.full(shape, -math.inf, dtype=torch.float64, device=q.device)
    l = torch.zeros(shape, dtype=torch.float64, device=q.device)
    acc = torch.zeros(*shape, v.shape[-1], dtype=torch.float64, device=q.device)
    for j in range(0, s_all.shape[-1], block):
        s = s_all[..., j:j + block]
        m_new = torch.maximum(m, s.max(dim=-1).values)
        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
        alpha = torch.exp(m - m_safe) if not inverted else torch.exp(m_safe - m).nan_to_num(0.0, 0.0, 0.0)
        p = torch.exp(s - m_safe[..., None])
        l = (l * alpha if rescale_l else l) + p.sum(dim=-1)
        acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ vd[..., j:j + block, :]
        m = m_new
    return acc / l[..., None] if divide else acc


# --------------------------------------------------------------------------- known mistakes


def mistakes(q, k, v, causal: bool, sm_scale, topic: str):
    """(variant output, likely mistake) pairs for one call, float64; `topic` picks the family."""
    B, H, S, D = q.shape
    dev = q.device
    scale = default_scale(D, sm_scale)
    keep = causal_keep(S, dev) if causal else None
    out = []
    if topic in ("blocks", "all"):
        for bn in BLOCK_CANDIDATES:
            if S <= bn:
                break
            out.append((streamed(q, k, v, scale, keep, bn, rescale_acc=False),
                        "acc was not rescaled when the running max grew: multiply acc by "
                        "alpha = exp(m_old - m_new) before adding p·V_j"))
            out.append((streamed(q, k, v, scale, keep, bn, rescale_l=False),
                        "l was not rescaled when the running max grew: l = alpha·l + rowsum(p)"))
            out.append((streamed(q, k, v, scale, keep, bn, inverted=True),
                        "the rescale factor is inverted: alpha = exp(m_old - m_new), which is at most 1"))
        out.append((streamed(q, k, v, scale, keep, S, divide=False),
                    "acc was never divided by l: o = acc / l, once, after the key loop"))
    if topic in ("ragged", "all"):
        for bn in BLOCK_CANDIDATES:
            pad = -S % bn
            if pad == 0:
                continue
            if not causal:  # under the causal mask, keys past S are hidden from every query anyway
                zeros = torch.zeros(B, H, pad, D, dtype=k.dtype, device=dev)
                kp, vp = torch.cat([k, zeros], 2), torch.cat([v, zeros], 2)
                out.append((attention64(q, kp, vp, scale),
                            "keys past S were loaded as zeros and kept with score 0: set their scores "
                            "to -inf (tl.where(cols < S, s, float('-inf')))"))
            full = S - S % bn
            if full > 0:
                out.append((attention64(q, k[:, :, :full], v[:, :, :full], scale,
                                        keep[:, :full] if keep is not None else None),
                            "the last, partial key block was skipped: loop over range(0, S, BLOCK_N) "
                            "and mask the keys past S"))
    if topic in ("causal", "all") and causal:
        for shift, hint in ((-1, "query i must see key i too: keep j <= i, not j < i (row 0 then sees "
                                 "no key at all)"),
                            (1, "the mask lets query i see key i + 1: keep j <= i"),):
            out.append((attention64(q, k, v, scale, causal_keep(S, dev, shift)), hint))
        out.append((attention64(q, k, v, scale),
                    "causal=True gave the unmasked result: apply the mask when CAUSAL is set"))
        i = torch.arange(S, device=dev)
        out.append((attention64(q, k, v, scale, i[None, :] >= i[:, None]),
                    "the mask is flipped: query i sees keys j <= i (the lower triangle), not j >= i"))
    if topic in ("noncausal", "all") and not causal:
        out.append((attention64(q, k, v, scale, causal_keep(S, dev)),
                    "causal=False was masked anyway: apply the mask only when CAUSAL is set"))
    if topic in ("scale", "all"):
        for wrong, hint in ((1.0 / math.sqrt(D), "sm_scale was ignored: 1/sqrt(D) was used instead of "
                                                 "the sm_scale passed in" + (" (0.0 is a scale, not 'use the "
                                                 "default': test `sm_scale is None`)" if scale == 0 else "")),
                            (1.0, "the scores were not scaled at all: multiply q·kᵀ by sm_scale"),
                            (scale * scale, "sm_scale was applied twice"),
                            *(((1.0 / scale, "the scores were divided by sm_scale: multiply instead"),)
                              if scale else ())):
            if abs(wrong - scale) > 1e-9 * scale:
                out.append((attention64(q, k, v, wrong, keep), hint))
    return out


def same(got64: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    """got equals a variant within tol; where the variant has NaN (a row with no key), got may be NaN or 0."""
    if got64.shape != want.shape:
        return False
    hole = torch.isnan(want)
    ok_hole = torch.isnan(got64) | (got64 == 0)
    if bool((hole & ~ok_hole).any()):
        return False
    fine = ~hole
    if not bool(torch.isfinite(got64[fine]).all()):
        return False
    return not bool(fine.any()) or float((got64[fine] - want[fine]).abs().max()) <= tol


def name_mistake(got64, q, k, v, causal, sm_scale, tol, topic="all") -> str:
    for variant, hint in mistakes(q, k, v, causal, sm_scale, topic):
        if same(got64, variant, tol):
            return hint
    return ""


def unwritten(got: torch.Tensor) -> str:
    """A description of the output rows the kernel never wrote, '' if none.

    Rows still holding POISON were never written, whatever their pattern. Rows of exact
    zeros (an o from torch.zeros is not poisoned) count only in the patterns a too-small
    grid leaves: whole heads, or the same trailing rows in every head.
    """
    poisoned = (got == POISON).all(dim=-1)  # [B, H, S]
    if bool(poisoned.any()):
        return _describe_unwritten(poisoned, strict=False)
    zeros = (got == 0).all(dim=-1)
    return _describe_unwritten(zeros, strict=True) if bool(zeros.any()) else ""


def _describe_unwritten(rows: torch.Tensor, strict: bool) -> str:
    B, H, S = rows.shape
    still = " (still 0: o was allocated with zeros)" if strict else ""
    heads = rows.all(dim=-1)  # [B, H]
    if bool(heads.all()):
        return (f"no row of o was written{still}: does the kernel store into O, and does the grid have at "
                "least one program on each axis (triton.cdiv(S, BLOCK_M) is 1 even when S < BLOCK_M)?")
    if bool(heads.any()):
        missing = [f"(b={b}, h={h})" for b in range(B) for h in range(H) if heads[b, h]]
        return (f"heads {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''} were never written{still}: "
                "axis 1 of the grid must run over all B·H heads, and pid → (b, h) must reach each one")
    per_row = rows.any(dim=0).any(dim=0)  # [S]
    first = int(per_row.nonzero()[0])
    if bool(per_row[first:].all()) and bool(rows[..., first:].all()) and first > 0:
        return (f"rows {first}..{S - 1} of every head were never written{still}: the grid's first axis must "
                f"cover every query row, triton.cdiv(S, BLOCK_M) blocks, not S // BLOCK_M")
    if strict:
        return ""
    idx = [int(i) for i in per_row.nonzero()[:6, 0]]
    return f"some rows were never written (rows {idx}…): is the store's mask or row offset wrong?"


def wrong_head(got64: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "result",
               offsets: str = ", and each tensor's start is b·stride_b + h·stride_h") -> str:
    """If a head's output equals another head's expected output, say which (`what` it holds, and
    how the kernel's head offsets should be formed)."""
    B, H = ref.shape[:2]
    for b in range(B):
        for h in range(H):
            g = got64[b, h]
            if not bool(torch.isfinite(g).all()) or float((g - ref[b, h]).abs().max()) <= tol:
                continue
            for b2 in range(B):
                for h2 in range(H):
                    if (b2, h2) != (b, h) and float((g - ref[b2, h2]).abs().max()) <= tol:
                        return (f"head (b={b}, h={h}) holds the {what} of head (b={b2}, h={h2}): "
                                f"program_id(1) = b·H + h, so b = pid // H and h = pid % H{offsets}")
    return ""


# --------------------------------------------------------------------------- calling the user's code


@dataclass
class Launch:
    kernel: str
    mine: bool  # the kernel's code is in the user's file
    file: str  # its file's base name
    grid: tuple | None
    constants: dict = field(default_factory=dict)


class Launches(list):
    """The launches the probe saw during a call; `watching` is False if this Triton offers no hook."""

    watching = False


@dataclass
class Returned:
    """One call's output values (None unless a plain tensor came back) and what the probe saw."""

    array: np.ndarray | None
    observed: dict
    inputs_after: list | None = None


def values(t: torch.Tensor) -> np.ndarray:
    """t's values as a contiguous array that crosses by value (bf16 as float32, exactly)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy()


def _launches(observed: dict) -> Launches:
    found = Launches()
    found.watching = observed.get("watching") is True
    for item in observed.get("launches") or []:
        if not isinstance(item, dict):
            continue
        grid = item.get("grid")
        grid = tuple(g for g in grid if isinstance(g, int)) if isinstance(grid, list) else None
        constants = item.get("constants") if isinstance(item.get("constants"), dict) else {}
        found.append(Launch(str(item.get("kernel", "?")), item.get("mine") is True, str(item.get("file", "")),
                            grid, constants))
    return found


def check_no_torch_compute(observed: dict, call: str, what: str) -> None:
    """Fail if the user's file computed with torch operations (matmul, softmax, exp, a copy to NumPy, ...)
    beside its kernels: a decoy launch must not pass for the work. Missing from the record fails too."""
    computed = observed.get("torch_compute")
    if not isinstance(computed, list) or computed:
        hint = f"{what} must come from your kernels: move the work into them"
        if set(map(str, computed or ())) & _HOST_READS:
            hint += ("; reading a tensor's values on the host (int(seq_lens.max()), .item(), .tolist()) counts too: "
                     "size grids and splits from shapes and arguments")
        fail("your file computes with torch operations beside its kernels", called=call,
             got=f"torch calls from your file: {', '.join(map(str, computed or ['(not recorded)']))}",
             expected="only allocations, views and launches in the launcher", hint=hint)


# Calls that bring a tensor's values to the host, which a launcher sizing its grid may reach for.
_HOST_READS = {"item", "tolist", "__int__", "__index__", "__float__", "__bool__", "numpy", "__array__"}


def call_user(sub, q, k, v, causal=False, sm_scale=None, *, guard: float = math.nan, return_inputs: bool = False):
    """Run the user's flash_attention in the subject on q, k, v as laid out here; returns (Returned, launches).

    `guard` is what the subject keeps in memory just after q, k and v (NaN: a load past S
    shows up). Fails at once if the probe saw a store past the end of a buffer.
    """
    kwargs = {}
    if causal:
        kwargs["causal"] = True
    if sm_scale is not None:
        kwargs["sm_scale"] = sm_scale
    sub.use_helper(PROBE)
    spec = {"device": str(q.device), "dtype": str(q.dtype).removeprefix("torch."), "return_inputs": return_inputs,
            "tensors": [{"stride": list(t.stride()), "guard": "nan" if math.isnan(guard) else guard}
                        for t in (q, k, v)]}
    outcome = sub.flash_attention.observe(*(values(t) for t in (q, k, v)),
                                          helper={"module": PROBE.stem, "spec": spec}, **kwargs)
    observed = outcome.extra.get("observed")
    observed = observed if isinstance(observed, dict) else {}
    if observed.get("overran") is True:
        fail("your kernel wrote past the end of o", called=describe(q, causal, sm_scale),
             got="values in the memory just after o (drill keeps a guard there)",
             expected="no store outside o",
             hint="mask the store: the last query block sticks out past S, so store only rows with "
                  "offs_m < S (tl.store(ptrs, o, mask=offs_m[:, None] < S))")
    array = outcome.result if isinstance(outcome.result, np.ndarray) and outcome.result.dtype.kind == "f" else None
    after = outcome.extra.get("inputs")
    after = [a for a in after if isinstance(a, np.ndarray)] if isinstance(after, list) else None
    return Returned(array, observed, after), _launches(observed)


def as_output(ret: Returned, q, call: str) -> torch.Tensor:
    """The output as a tensor here, once it is known to be a plain tensor shaped, typed and placed like q."""
    check_returned(ret, q, call)
    return torch.from_numpy(ret.array).to(device=q.device, dtype=q.dtype)


def check_returned(ret: Returned, q, call: str) -> None:
    """Fail unless a plain tensor came back, with q's shape, dtype and device."""
    seen = ret.observed
    kind = str(seen.get("type", "nothing"))
    want_dtype = str(q.dtype).removeprefix("torch.")
    if seen.get("plain") is True and seen.get("dtype") != want_dtype:
        fail("o has the wrong dtype", called=call, got=f"torch.{seen.get('dtype')}", expected=f"{q.dtype}, the dtype of q",
             hint="allocate o with q's dtype and store o.to(O.dtype.element_ty) in the kernel")
    if seen.get("plain") is not True or ret.array is None:
        subclass = seen.get("plain") is False and kind not in ("NoneType", "ndarray", "tuple", "list")
        fail(f"flash_attention returned {kind}, not a tensor" if not subclass else
             f"flash_attention returned a tensor subclass ({kind}): only a plain torch.Tensor is graded",
             called=call, got=f"a {kind} object", expected=f"a torch.Tensor of shape {tuple(q.shape)}",
             hint="return o from the launcher (the kernel writes into it; it returns nothing itself)")
    if tuple(ret.array.shape) != tuple(q.shape):
        fail("o has the wrong shape", called=call, got=f"shape {tuple(ret.array.shape)}",
             expected=f"shape {tuple(q.shape)}, the same as q")
    if str(seen.get("device", "")).split(":")[0] != q.device.type:
        fail("o is on the wrong device", called=call, got=str(seen.get("device")), expected=str(q.device))


def rows_text(t: torch.Tensor, b: int, h: int, i: int, cols: int = 4) -> str:
    vals = ", ".join(f"{float(x):.5g}" for x in t[b, h, i, :cols].double().cpu())
    return f"o[{b}, {h}, {i}, :{cols}] = [{vals}{', …' if t.shape[-1] > cols else ''}]"


def worst_index(got64: torch.Tensor, want: torch.Tensor) -> tuple[int, int, int]:
    diff = (got64 - want).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    flat = int(diff.reshape(-1).argmax())
    B, H, S, D = want.shape
    return flat // (H * S * D), flat // (S * D) % H, flat // D % S


def verdict(got: torch.Tensor, want: torch.Tensor, tol: float, call: str, hint: str = "",
            naive_err: float | None = None, extra: str = "") -> None:
    """Fail unless every element of got is within tol of want (NaN, inf and poison count as wrong)."""
    err = max_error(got.detach().double().cpu().numpy(), want.cpu().numpy())
    if err <= tol:
        return
    b, h, i = worst_index(got.detach().double(), want)
    allowed = f"allowed {tol:.3g}" + (f" = max(2 × naive attention's error {naive_err:.3g}, a floor)"
                                      if naive_err is not None else "")
    fail(f"o is wrong (largest error {err:.3g}, {allowed}){extra}", called=call,
         got=rows_text(got, b, h, i), expected=rows_text(want, b, h, i), hint=hint)


# --------------------------------------------------------------------------- timing (GPU only)
#
# Whole round trips timed here, less a do-nothing kernel's (drill/grader/roundtrip.py says
# why). Used by the speed check and by `drill bench --kernel` (drill/grader/bench_user.py).


NULL_KERNEL = Path(__file__).with_name("_triton_null.py")
TIMED_CALLS = 9  # per size; each on inputs from a fresh, unpredictable seed, each output checked


def seeded_inputs(shape, dtype: torch.dtype, seed: int, device: str):
    """The q, k, v the probe draws for `seed` (the same code, so the same values on the same GPU)."""
    gen = torch.Generator(device=device).manual_seed(int(seed))
    return tuple(torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32).to(dtype)
                 for _ in range(3))


def null_subject(sub):
    """A second subject, with drill's do-nothing kernel as its file: the round trip without a kernel."""
    from drill.grader.proxy import SubmissionProxy

    proxy = SubmissionProxy(roundtrip.calibration_subject(sub._subject, NULL_KERNEL, ["flash_attention"]))
    proxy.use_helper(PROBE)
    return proxy


def timed_round_trips(proxy, shape, dtype: torch.dtype, causal: bool, seeds, check=None, *, positional: bool = False,
                      device: str = "cuda", timeout: float | None = None) -> float:
    """Median ms of whole calls (request, inputs drawn in the subject from the seed, kernel, output back).

    Timed here, in the trusted process: nothing in the subject can shorten it. `check(seed,
    ret)` sees every output, outside the timed part. positional: call flash_attention(q, k,
    v, causal, 1/sqrt(D)), the form `drill bench --kernel` documents, instead of
    flash_attention(q, k, v[, causal=True]) as the exercise's checks do.
    """
    proxy.use_helper(PROBE)
    spec = {"shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "device": device}
    args = (bool(causal), default_scale(shape[-1], None)) if positional else ()
    kwargs = {"causal": True} if causal and not positional else {}

    def call(seed):
        helper = {"module": PROBE.stem, "entry": "seeded", "spec": dict(spec, seed=int(seed))}
        return proxy.flash_attention.observe(*args, helper=helper, timeout=timeout, **kwargs)

    def seen(seed, outcome):
        observed = outcome.extra.get("observed")
        array = outcome.result if isinstance(outcome.result, np.ndarray) and outcome.result.dtype == np.int16 else None
        check(seed, Returned(array, observed if isinstance(observed, dict) else {}))

    return roundtrip.timed_round_trips(call, list(seeds), seen if check is not None else None)


@dataclass(frozen=True)
class Timing:
    """One size's figures, in ms: the user's round trip and the do-nothing kernel's (the transfer)."""

    round_trip: float
    transfer: float
    max_error: float  # largest |o - reference| over the outputs checked

    @property
    def kernel(self) -> float:
        return max(self.round_trip - self.transfer, 1e-3)

    @property
    def within_noise(self) -> bool:
        return roundtrip.within_noise(self.round_trip, self.transfer)


def time_seeded(sub, calibration, shape, dtype: torch.dtype, causal: bool, reference, call: str, *,
                calls: int = TIMED_CALLS, positional: bool = False, device: str = "cuda",
                warmup_timeout: float | None = None, timeout: float | None = None) -> Timing:
    """Time the user's kernel at one size through `sub`, less the same calls through `calibration`.

    One warm-up call (compiles, tunes), then `calls` timed ones; every call draws its inputs
    from a fresh seed the subject cannot predict, and every output of the user's kernel is
    checked against reference(q, k, v, causal) on the same inputs drawn here, within a few
    units of the dtype's rounding (fails the check, CheckFailure, otherwise).
    """
    errors = []

    def check(seed, ret):
        q, k, v = seeded_inputs(shape, dtype, seed, device)
        check_returned(ret, q, call)
        want = reference(q, k, v, causal).double()
        got = from_bits(ret, dtype, q.device)
        errors.append(max_error(got.double().cpu().numpy(), want.cpu().numpy()))
        verdict(got, want, FLOOR[dtype] * max(1.0, float(want.abs().max())), call)

    seeds = roundtrip.fresh_seeds(calls + 1)  # the first is the warm-up
    kw = dict(positional=positional, device=device)
    # Nothing of the user's file runs while the transfer is calibrated, nor after its own calls
    # (when the caller times the references): a kernel or thread it left running would slow
    # those and flatter its own figure. Closing ends every process of the file; the next call
    # starts it again (the warm-up call pays for the import and the compiles).
    sub._subject.close()
    timed_round_trips(calibration, shape, dtype, causal, seeds[:1], timeout=warmup_timeout, **kw)
    transfer = timed_round_trips(calibration, shape, dtype, causal, seeds[1:], timeout=timeout, **kw)
    calibration._subject.close()
    timed_round_trips(sub, shape, dtype, causal, seeds[:1], check, timeout=warmup_timeout, **kw)
    round_trip = timed_round_trips(sub, shape, dtype, causal, seeds[1:], check, timeout=timeout, **kw)
    sub._subject.close()
    return Timing(round_trip, transfer, max(errors))


def from_bits(ret: Returned, dtype: torch.dtype, device) -> torch.Tensor:
    """The output sent as int16 bits, back as a tensor of its dtype."""
    return torch.from_numpy(ret.array).to(device).view(dtype)


def tflops(B, H, S, D, causal: bool, ms: float) -> float:
    flop = 4.0 * B * H * S * S * D / (2 if causal else 1)
    return flop / (ms * 1e-3) / 1e12


def median_ms(fn) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
