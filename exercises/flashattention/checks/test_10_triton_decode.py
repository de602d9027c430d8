"""Hidden checks for 10_triton_decode.py.

Under the Triton interpreter (no GPU; drill's runner sets TRITON_INTERPRET=1): small fp32
shapes on the CPU, correctness only; the bf16 case and the speed check are GPU-only (the speed
check skips, saying so).
On a GPU: the same correctness checks in fp16 against float64 attention on the upcast inputs,
one GQA case in bf16 as well (test_gqa_and_mqa), then GB/s of K and V read, timed here (wall
clock around each call, a fresh q every call, every output checked) against drill's reference
decode kernel.

The user's function is only ever called with tensors and ints, and its result is used as a
value; cache rows past seq_len hold NaN (in one call large finite values, so that telling the live
rows by their NaN instead of by seq_lens shows too), so reading them shows in the output.

Every call whose output is judged runs through the launch probe (_decode_probe.watched, built on
07's _triton_probe): kernels from the user's file must be launched, the split kernel over
(num_splits, B·Hq) and a merge over B·Hq programs, with no torch computing beside them, and the
split kernel's PART_O and PART_L, copied just after it ran, must hold each split's own partial
(keys [split·chunk, min((split+1)·chunk, seq_len)), chunk = ceil(seq_len / num_splits)), as the
statement lays them out. Once copied, the probe adds PARTIAL_SHIFT to them (every PART_O-sized
argument of that launch), and the o that comes back must have moved by as much: the merge has to
be a merge of those partials. So no call can tell the watched ones from the others, and a kernel that
is right only at the one shape the launch check used to try, or that leaves the splitting to one
program, is seen.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from drill.grader import fixtures, roundtrip
from drill.grader.expect import close, fail, matches, note
from drill.grader.proxy import SubmissionProxy

from . import _triton_forward_support as tf
from ._triton_forward_support import interpreter_on

INTERPRET = interpreter_on()  # the subject's setting: the runner turns the interpreter on there without a GPU
GPU = not INTERPRET and torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
DTYPE = torch.float16 if GPU else torch.float32
ATOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def pick(interpreter, gpu):
    return gpu if GPU else interpreter


@pytest.fixture
def mode():
    if not (INTERPRET or GPU):
        fail("no CUDA GPU here and the Triton interpreter is off, so the kernels cannot run: run with "
             "TRITON_INTERPRET=1 in the environment")
    return "gpu" if GPU else "interpreter"


# --------------------------------------------------------------------------- inputs and reference


def make_cache(B, Hq, Hkv, lens, D, *, seed, dtype=DTYPE, q_scale=1.0, poison=float("nan"), S_max=None,
               rise=0.0, layout="contiguous"):
    """q [B, Hq, D], k, v [B, Hkv, S_max, D] with `poison` in every row past seq_len, seq_lens int32.

    `rise` (Hq = Hkv only): each key's score is `rise` above the one before it, plus the random
    part, so the running max grows block after block and a missing rescale shows.
    layout="strided": each tensor laid out as in a real model, all with unit last stride:
      q  the second half of a [B, Hq, 2D] projection (head stride 2D)
      k  contiguous [B, Hkv, S_max, D]
      v  a transposed view of a [B, S_max, Hkv, D] cache (head stride D, row stride Hkv·D)
    so a kernel that reads V with K's strides, or q at (b·Hq + h)·D, reads the wrong numbers.
    """
    g = torch.Generator().manual_seed(fixtures.seed(seed))  # stream `seed` of the run's secret seed
    S_max = S_max or max(lens)
    q = torch.randn(B, Hq, D, generator=g) * q_scale
    k = torch.randn(B, Hkv, S_max, D, generator=g)
    v = torch.randn(B, Hkv, S_max, D, generator=g)
    if rise:
        assert Hq == Hkv
        # Adding c·q to a key adds c·|q|²/√D to its score.
        ramp = rise * torch.arange(S_max, dtype=torch.float32) * math.sqrt(D)
        k += (ramp[None, None, :, None] / (q * q).sum(-1)[:, :, None, None]) * q[:, :, None, :]
    for b, n in enumerate(lens):
        k[b, :, n:] = poison
        v[b, :, n:] = poison
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    q, k, v = q.to(DEVICE, dtype), k.to(DEVICE, dtype), v.to(DEVICE, dtype)
    if layout == "strided":
        wide = torch.full((B, Hq, 2 * D), float("nan"), dtype=dtype, device=DEVICE)
        wide[..., D:] = q
        q = wide[..., D:]
        v = v.transpose(1, 2).contiguous().transpose(1, 2)
    return q, k, v, seq_lens.to(DEVICE)


def reference_partials(q, k, v, seq_lens, num_splits):
    """(O [B·Hq, num_splits, D], L [B·Hq, num_splits]) in float64: each split's normalised output and
    logsumexp over keys [split·chunk, min((split+1)·chunk, seq_len)), chunk = ceil(seq_len / num_splits);
    an empty split has O = 0, L = -inf."""
    q, k, v = (t.detach().double().cpu() for t in (q, k, v))
    B, Hq, D = q.shape
    Hkv = k.shape[1]
    O = torch.zeros(B * Hq, num_splits, D, dtype=torch.float64)
    L = torch.full((B * Hq, num_splits), -math.inf, dtype=torch.float64)
    for b in range(B):
        n = int(seq_lens[b])
        chunk = -(-n // num_splits)
        for h in range(Hq):
            kv = h // (Hq // Hkv)
            s = k[b, kv, :n] @ q[b, h] / math.sqrt(D)
            for c in range(num_splits):
                lo, hi = c * chunk, min((c + 1) * chunk, n)
                if lo < hi:
                    O[b * Hq + h, c] = torch.softmax(s[lo:hi], 0) @ v[b, kv, lo:hi]
                    L[b * Hq + h, c] = torch.logsumexp(s[lo:hi], 0)
    return O.numpy(), L.numpy()


def reference(q, k, v, seq_lens, *, head_map="div", merge=None, num_splits=None, chunking="ceil",
              scale=None) -> np.ndarray:
    """o [B, Hq, D] in float64 from the live rows; the keyword arguments model mistakes.

    head_map="mod": head h reads KV head h % Hkv. merge="mean": the split outputs averaged.
    chunking="floor": splits of seq_len // num_splits keys, the rest never read.
    """
    q, k, v = (t.detach().double().cpu() for t in (q, k, v))
    B, Hq, D = q.shape
    Hkv = k.shape[1]
    out = torch.zeros(B, Hq, D, dtype=torch.float64)
    for b in range(B):
        n = int(seq_lens[b])
        for h in range(Hq):
            kv = h // (Hq // Hkv) if head_map == "div" else h % Hkv
            s = k[b, kv, :n] @ q[b, h] * (1 / math.sqrt(D) if scale is None else scale)
            if merge is None and chunking == "ceil":
                out[b, h] = torch.softmax(s, 0) @ v[b, kv, :n]
                continue
            size = -(-n // num_splits) if chunking == "ceil" else max(n // num_splits, 1)
            parts, lses = [], []
            for c in range(num_splits):
                lo, hi = c * size, min((c + 1) * size, n)
                if lo < hi:
                    parts.append(torch.softmax(s[lo:hi], 0) @ v[b, kv, lo:hi])
                    lses.append(torch.logsumexp(s[lo:hi], 0))
                else:
                    parts.append(torch.zeros(D, dtype=torch.float64))
                    lses.append(torch.tensor(-math.inf, dtype=torch.float64))
            P, L = torch.stack(parts), torch.stack(lses)
            if merge == "mean":
                out[b, h] = P.mean(0)
            else:
                out[b, h] = (torch.softmax(L, 0)[:, None] * P).sum(0)
    return out.numpy()


def describe(q, k, seq_lens, num_splits) -> str:
    lens = seq_lens.tolist()
    return (f"flash_decode(q[{'x'.join(map(str, q.shape))}] {str(q.dtype).removeprefix('torch.')}, "
            f"k_cache/v_cache[{'x'.join(map(str, k.shape))}], seq_lens={lens if len(lens) <= 6 else '…'}, "
            f"num_splits={num_splits})")


LAUNCH_PROBE = Path(__file__).with_name("_triton_probe.py")  # 07's launch recorder, run in the subject
PROBE = Path(__file__).with_name("_decode_probe.py")  # its `watched` entry adds the split kernel's partials
# Added by the probe to every PART_O-sized argument of the split launch just after it ran (exact in
# fp16 and bf16): the merge must read the partials, so the o it returns moves by as much.
PARTIAL_SHIFT = 0.25


def user_decode(sub, q, k, v, seq_lens, **kw):
    """The user's flash_decode, run in the subject through the launch probe: q, k and v are rebuilt
    there with their strides (NaN in the guard memory after each) on q's device in q's dtype,
    seq_lens keeps int32. Returns (o as a float array or None, what the probe saw, the float
    tensor arguments of each of the user's launches just after it ran)."""
    sub.use_helper(LAUNCH_PROBE)
    sub.use_helper(PROBE)
    spec = {"device": str(q.device), "dtype": str(q.dtype).removeprefix("torch."),
            "tensors": [{"stride": list(t.stride()), "guard": "nan"} for t in (q, k, v)] + [{"keep_dtype": True}],
            "shift": {"bh": q.shape[0] * q.shape[1], "D": q.shape[2], "by": PARTIAL_SHIFT}}
    outcome = sub.flash_decode.observe(*(t.detach().float().cpu().numpy() for t in (q, k, v)),
                                       seq_lens.detach().cpu().numpy(),
                                       helper={"module": PROBE.stem, "entry": "watched", "spec": spec}, **kw)
    observed = outcome.extra.get("observed")
    observed = observed if isinstance(observed, dict) else {}
    after = outcome.extra.get("after_launches")
    result = outcome.result if isinstance(outcome.result, np.ndarray) and outcome.result.dtype.kind == "f" else None
    shifted_at = outcome.extra.get("shifted_at")
    observed["shifted_at"] = shifted_at if type(shifted_at) is int else None
    if result is not None and observed["shifted_at"] is not None:
        # The probe added PARTIAL_SHIFT to PART_O after the split kernel ran: a merge of the partials
        # returns o + PARTIAL_SHIFT (the weights sum to 1). check_kernels asks that this launch be the
        # split kernel's, so a merge that ignores the partials is off by PARTIAL_SHIFT here.
        result = result.astype(np.float64) - PARTIAL_SHIFT
    return result, observed, after


def run(sub, q, k, v, seq_lens, num_splits=None):
    """(o as a float64 array [B, Hq, D], what the probe saw, the launches' arguments after)."""
    kw = {} if num_splits is None else {"num_splits": num_splits}
    out, observed, after = user_decode(sub, q, k, v, seq_lens, **kw)
    what = describe(q, k, seq_lens, num_splits)
    if out is None:
        fail(f"{what} must return a tensor o [B, Hq, D]", called=what,
             got=f"{observed.get('type', '?')} {observed.get('dtype', '')}".strip())
    arr = out.astype(np.float64)
    if arr.shape != tuple(q.shape):
        fail("o has the wrong shape", called=what, got=f"shape {arr.shape}", expected=f"shape {tuple(q.shape)}")
    return arr, observed, after


def call(sub, q, k, v, seq_lens, num_splits=None):
    return run(sub, q, k, v, seq_lens, num_splits)[0]


# --------------------------------------------------------------------------- naming the mistake


def diagnose(sub, q, k, v, seq_lens, num_splits, got, atol) -> str:
    Hq, Hkv = q.shape[1], k.shape[1]
    if not np.isnan(got).any() and matches(got + PARTIAL_SHIFT, reference(q, k, v, seq_lens), atol=atol):
        return (f"o did not come from the split kernel's partials: the checks add {PARTIAL_SHIFT:g} to PART_O once "
                f"the split kernel has run, and a merge of them returns o + {PARTIAL_SHIFT:g}; yours returned the "
                "attention itself, so something other than _decode_merge_kernel's merge of PART_O and PART_L "
                "computed it")
    if not all(t.is_contiguous() for t in (q, k, v)):
        try:  # the same values laid out contiguously: if they come out right, a stride was ignored
            again = call(sub, q.contiguous(), k.contiguous(), v.contiguous(), seq_lens, num_splits)
        except Exception:  # noqa: BLE001 - the first call's failure is the verdict
            again = None
        if again is not None and matches(again, reference(q, k, v, seq_lens), atol=atol):
            return ("right with contiguous tensors, wrong with these layouts (q cut from a wider tensor, V stored "
                    "[B, S, Hkv, D]): read q through stride_qb, stride_qh, K through stride_kb, stride_kh, "
                    "stride_ks and V through its own stride_vb, stride_vh, stride_vs")
    if Hq != Hkv and Hkv > 1 and matches(got, reference(q, k, v, seq_lens, head_map="mod"), atol=atol):
        return (f"query head h read KV head h % Hkv; groups of {Hq // Hkv} consecutive query heads share a KV "
                f"head: kv = h // (Hq // Hkv)")
    splits = num_splits or 0
    if splits > 1:
        if matches(got, reference(q, k, v, seq_lens, merge="mean", num_splits=splits), atol=atol):
            return ("the split outputs were averaged: weight split s by e^(L_s - L) with L = log Σ e^(L_s), "
                    "empty splits weighing 0")
        if matches(got, reference(q, k, v, seq_lens, chunking="floor", num_splits=splits), atol=atol):
            return ("each split holds seq_len // num_splits keys and the remainder is never read: "
                    "chunk = tl.cdiv(seq_len, num_splits), the last split shorter")
    live = torch.arange(k.shape[2], device=k.device)[None, None, :, None] < seq_lens.long()[:, None, None, None]
    if not np.isnan(got).any() and not bool(live.all()) and not torch.isnan(k).any():
        # Finite values past seq_len: if NaN there instead leaves the rows that are live right, those
        # rows were read (or seq_lens was not what told them apart).
        nan_k, nan_v = (torch.where(live, t, torch.full_like(t, float("nan"))) for t in (k, v))
        try:
            again = call(sub, q, nan_k, nan_v, seq_lens, num_splits)
        except Exception:  # noqa: BLE001 - the first call's failure is the verdict
            again = None
        if again is not None and not np.isnan(again).any() and matches(again, reference(q, k, v, seq_lens), atol=atol):
            return ("right when the rows past seq_len hold NaN, wrong when they hold finite values: the live rows "
                    "are the first seq_lens[b] (tl.load(SEQ_LENS + b)); mask every K and V load with rows < hi")
    if np.isnan(got).any():
        # Same call with zeros instead of NaN past seq_len: if the NaN goes, rows past it were read.
        zero_k = torch.where(torch.isnan(k), torch.zeros_like(k), k)
        zero_v = torch.where(torch.isnan(v), torch.zeros_like(v), v)
        try:
            again = call(sub, q, zero_k, zero_v, seq_lens, num_splits)
        except Exception:  # noqa: BLE001 - the first call's failure is the verdict
            again = got
        if not np.isnan(again).any():
            return ("rows past seq_len were read (they hold NaN here): mask every K and V load with "
                    "rows < hi, other=0.0, and set the scores of those rows to -inf")
        try:  # one split has no empty split: a NaN left then comes from exp overflowing
            single = call(sub, q, zero_k, zero_v, seq_lens, 1)
        except Exception:  # noqa: BLE001
            single = again
        if np.isnan(single).any() or np.isinf(single).any():
            return ("o has NaN even with one split and zeros past seq_len: exp overflowed; subtract the running "
                    "max before exp (p = exp(s - m_new)) and rescale l and acc by exp(m - m_new)")
        return ("o has NaN only with several splits: an empty split (its start is past seq_len) computed "
                "0/0; give it O = 0, L = -inf, and in the merge use weights exp(L_s - max L), 0 for it")
    if matches(got, reference(q, k, v, seq_lens, scale=1.0), atol=atol):
        return "the scores were not scaled: s = (k · q) · sm_scale with sm_scale = 1/√D"
    want = reference(q, k, v, seq_lens)
    bad = np.argwhere(np.abs(got - want) > atol)
    if bad.size:
        b, h = int(bad[0][0]), int(bad[0][1])
        return (f"the first wrong row is sequence {b} (seq_len {int(seq_lens[b])}), query head {h}; if only long "
                f"sequences are wrong, check that l and acc are both multiplied by alpha = exp(m - m_new) "
                f"when the running max grows")
    return ""


def check(sub, q, k, v, seq_lens, num_splits=None, atol=None):
    atol = atol or ATOL[q.dtype]
    got, observed, after = run(sub, q, k, v, seq_lens, num_splits)
    want = reference(q, k, v, seq_lens)
    tol = atol * max(1.0, float(np.abs(want).max()))
    if np.isnan(got).any() or not matches(got, want, atol=tol):
        hint = diagnose(sub, q, k, v, seq_lens, num_splits, got, tol)
        close(got, want, describe(q, k, seq_lens, num_splits), atol=tol, what="o", hint=hint, nan_hint=hint)
    check_kernels(q, k, v, seq_lens, num_splits, observed, after, atol)
    return got


def check_kernels(q, k, v, seq_lens, num_splits, observed, after, atol):
    """The work was the user's kernels': a launch of the split kernel over (num_splits, B·Hq) and of a
    merge over B·Hq programs after it, no torch computing beside them, and the partials the split
    kernel left in its float32 arguments are each split's own (statement's chunking)."""
    B, Hq, D = q.shape
    bh = B * Hq
    what = describe(q, k, seq_lens, num_splits)
    mine = [launch for launch in tf._launches(observed) if launch.mine]
    if not mine:  # fails closed: no launch seen from the user's file is no pass, whatever hid it
        launches = tf._launches(observed)
        others = ", ".join(sorted({f"{launch.kernel} ({launch.file})" for launch in launches}))
        fail("no @triton.jit kernel from your file was launched", called=what,
             got=(f"launches: {others}" if others else "no Triton launch at all" if launches.watching
                  else "no Triton launch could be watched (was triton's JITFunction.run replaced?)"),
             expected="_decode_split_kernel[(num_splits, B * Hq)](...) and _decode_merge_kernel[(B * Hq,)](...)",
             hint="the exercise is the kernels: compute the partials and the merge inside your @triton.jit "
                  "functions, not with torch operations")
    tf.check_no_torch_compute(observed, what, "o")
    grids = [launch.grid for launch in mine]
    if any(g is None for g in grids):  # fails closed: a grid hidden from the probe hides the split
        fail("a launch grid of your kernels could not be read", called=what,
             got=", ".join(f"{launch.kernel}: {list(launch.grid) if launch.grid else 'unreadable'}" for launch in mine),
             expected="_decode_split_kernel[(num_splits, B * Hq)](...) and _decode_merge_kernel[(B * Hq,)](...)",
             hint="launch with a tuple of ints as the grid, as flash_decode in the statement does (a callable grid "
                  "is called with the launch's int constants only)")
    if num_splits is None:
        split = [i for i, g in enumerate(grids) if len(g) >= 2 and g[0] >= 1 and math.prod(g[1:]) == bh]
    else:
        split = [i for i, g in enumerate(grids) if num_splits in g and math.prod(g) == num_splits * bh]
    if not split:
        fail(f"no launch of your kernels spans num_splits = {num_splits if num_splits else 'your choice of'} "
             "splits", called=what,
             got="grids " + ", ".join(str(list(g)) for g in grids),
             expected=f"the split kernel's grid (num_splits, B * Hq) = ({num_splits or 'num_splits'}, {bh})",
             hint="num_splits was not used as given: launch one program per (split, b·h), "
                  "grid = (num_splits, B * Hq), and cut each sequence into num_splits chunks")
    first = split[0]
    splits = num_splits or grids[first][0]
    if observed.get("shifted_at") != first:
        fail("the split kernel's partials could not be followed into the merge", called=what,
             got="grids " + ", ".join(str(list(g)) for g in grids),
             expected=f"_decode_split_kernel[({splits}, {bh})] as the first launch of your kernels, writing PART_O "
                      f"[B * Hq, num_splits, D] and PART_L, then _decode_merge_kernel[({bh},)] reading them",
             hint="launch the split kernel first, over grid (num_splits, B * Hq); the merge reads its partials")
    if not any(math.prod(g) == bh for g in grids[first + 1:]):
        fail("no merge kernel was launched after the split kernel", called=what,
             got="grids " + ", ".join(str(list(g)) for g in grids),
             expected=f"_decode_merge_kernel[(B * Hq,)] = [{bh}] after _decode_split_kernel[({splits}, {bh})]",
             hint="merge the num_splits partials of each (b, h) in a second kernel, one program per b·Hq + h")
    args = after[first] if isinstance(after, list) and first < len(after) and isinstance(after[first], list) else None
    if args is None:
        fail("the split kernel's partials were not recorded", called=what,
             expected="PART_O and PART_L as the split kernel left them")
    arrays = [a[1] for a in args if isinstance(a, list) and len(a) == 2 and isinstance(a[1], np.ndarray)
              and a[1].dtype.kind == "f"]
    want_o, want_l = reference_partials(q, k, v, seq_lens, splits)
    live = np.isfinite(want_l)
    tol_o = atol * max(1.0, float(np.abs(want_o).max()))
    tol_l = atol * np.maximum(1.0, np.abs(np.where(live, want_l, 0.0)))

    def lse_ok(got):
        got = got.astype(np.float64)
        return (bool((np.abs(got[live] - want_l[live]) <= tol_l[live]).all())
                and bool((got[~live] <= -1e30).all()))

    def o_ok(got):
        return bool((np.abs(got.astype(np.float64)[live] - want_o[live]) <= tol_o).all())

    L = [a.reshape(want_l.shape) for a in arrays if a.size == want_l.size]
    O = [a.reshape(want_o.shape) for a in arrays if a.size == want_o.size]
    if any(lse_ok(a) for a in L) and any(o_ok(a) for a in O):
        return
    got_l = L[0].astype(np.float64) if L else None
    where = "no float32 argument of the split kernel shaped like PART_L [B * Hq, num_splits] holds them"
    if got_l is not None:
        bad = [(r, c) for r in range(bh) for c in range(splits)
               if not (abs(got_l[r, c] - want_l[r, c]) <= tol_l[r, c] if live[r, c] else got_l[r, c] <= -1e30)]
        if bad:
            r, c = bad[0]
            n = int(seq_lens[r // Hq])
            chunk = -(-n // splits)
            where = (f"first wrong: b={r // Hq}, h={r % Hq}, split {c} (keys [{min(c * chunk, n)}, "
                     f"{min((c + 1) * chunk, n)}) of seq_len {n}): PART_L {got_l[r, c]:.6g}, expected "
                     f"{want_l[r, c]:.6g}")
    fail("o is right, but the split kernel's partials are not each split's own", called=what,
         got=where if got_l is not None and where.startswith("first") else
         "no float32 argument of the split kernel shaped like PART_L [B * Hq, num_splits] and PART_O "
         "[B * Hq, num_splits, D] holds them",
         expected=f"PART_O[b * Hq + h, split, :] and PART_L[b * Hq + h, split] for each of the {splits} splits",
         hint="program (split, b * Hq + h) handles keys [split * chunk, min((split + 1) * chunk, seq_len)) with "
              "chunk = ceil(seq_len / num_splits), and writes their normalised output and natural-log "
              "logsumexp (O = 0, L = -inf for an empty split); the merge then combines them")


# --------------------------------------------------------------------------- the checks


def test_one_head_per_kv_head(sub, mode):
    """One sequence, one query head per KV head (Hq = Hkv)"""
    q, k, v, sl = make_cache(1, 2, 2, [pick(37, 1000)], pick(16, 64), seed=1)
    check(sub, q, k, v, sl)


def test_gqa_and_mqa(sub, mode):
    """GQA: query head h reads KV head h // (Hq / Hkv); MQA with Hkv = 1; q, K and V each through its own strides"""
    for Hq, Hkv in [(4, 2), (8, 2), (6, 1)]:
        q, k, v, sl = make_cache(2, Hq, Hkv, pick([30, 21], [700, 300]), pick(16, 128), seed=Hq * 10 + Hkv)
        check(sub, q, k, v, sl, num_splits=3)
    # A q cut from a wider projection and a V cache stored [B, S, Hkv, D]: the launcher passes each
    # tensor's strides, and the kernel must read each through its own.
    q, k, v, sl = make_cache(2, 4, 2, pick([30, 21], [700, 300]), pick(32, 64), seed=9, layout="strided")
    check(sub, q, k, v, sl, num_splits=3)
    if GPU:  # bf16 too, against float64 attention on the same bf16 values
        q, k, v, sl = make_cache(2, 8, 2, [700, 300], 128, seed=10, dtype=torch.bfloat16)
        check(sub, q, k, v, sl, num_splits=3)
        check(sub, q, k, v, sl)


def test_ragged_seq_lens(sub, mode):
    """seq_lens from 1 to S_max in one batch; cache rows past seq_len hold NaN, then large finite values"""
    lens = pick([1, 40, 17, 2], [1, 3000, 517, 64])
    q, k, v, sl = make_cache(4, 4, 2, lens, pick(16, 128), seed=3, S_max=pick(48, 4096))
    check(sub, q, k, v, sl)
    check(sub, q, k, v, sl, num_splits=4)
    # The rows past seq_len may hold anything: here finite values that would swamp the softmax if
    # read, so a kernel that tells the live rows by their NaN, not by seq_lens, is seen.
    q, k, v, sl = make_cache(4, 4, 2, lens, pick(16, 128), seed=11, S_max=pick(48, 4096), poison=50.0)
    check(sub, q, k, v, sl, num_splits=3)


@pytest.mark.parametrize("num_splits", [1, 3, 16], ids=lambda n: f"splits={n}")
def test_split_counts(sub, mode, num_splits):
    """Any num_splits gives full attention, more splits than keys included"""
    lens = pick([33, 9], [2000, 9])
    q, k, v, sl = make_cache(2, 4, 4, lens, pick(16, 64), seed=4)
    check(sub, q, k, v, sl, num_splits=num_splits)
    # Scores rising along the sequence (16 over the longest): whatever the block size, the
    # running max grows inside a split, and acc or l left unrescaled is wrong by e^(growth).
    q, k, v, sl = make_cache(2, 4, 4, lens, pick(16, 64), seed=8, rise=16 / max(lens))
    check(sub, q, k, v, sl, num_splits=num_splits)


def test_large_scores(sub, mode):
    """Scores near ±1e3 neither overflow nor lose accuracy"""
    D = pick(16, 64)
    q, k, v, sl = make_cache(1, 2, 1, [pick(45, 900)], D, seed=5, q_scale=300.0)
    check(sub, q, k, v, sl, num_splits=3, atol=ATOL[q.dtype] * 10)


@pytest.mark.observed
def test_kernels_launched_over_the_splits(sub, mode):
    """Your @triton.jit kernels do the work, the split kernel over (num_splits, B·Hq) programs"""
    B, Hq, Hkv, splits = 2, 4, 2, 5
    q, k, v, sl = make_cache(B, Hq, Hkv, pick([37, 20], [900, 400]), pick(16, 64), seed=7)
    what = describe(q, k, sl, splits)
    out, observed, after = user_decode(sub, q, k, v, sl, num_splits=splits)
    # Launches, no torch compute, the split grid, the merge after it, each split's own partials.
    check_kernels(q, k, v, sl, splits, observed, after, ATOL[q.dtype])
    if out is None or out.shape != tuple(q.shape):
        fail("o did not come back as a tensor [B, Hq, D]", called=what)
    want = reference(q, k, v, sl)
    tol = ATOL[q.dtype] * max(1.0, float(np.abs(want).max()))
    close(out.astype(np.float64), want, what, atol=tol, what="o", nan_hint="o has NaN")


# --------------------------------------------------------------------------- GPU only

# (B, Hq, Hkv, S), D = 128, 4.3 and 2.1 GB of K and V: a large batch, and one long sequence, where
# a kernel that does not split the keys leaves most SMs idle.
SPEED_CASES = [(32, 32, 8, 32768), (1, 32, 8, 524288)]
SPEED_D = 128
SPEED_DTYPE = "float16"
TIMED_CALLS = 9  # per size, after one untimed call; each on a fresh q, each output checked
# Of the reference kernel's GB/s, at every size. Low on purpose: a kernel with one program per query
# head reads each K/V byte Hq/Hkv times (the solution measured 0.12-0.18× on an H200); what fails is a
# kernel that leaves the GPU idle (no split of the keys, tiny blocks), at 0.01-0.03×.
MIN_SPEED_RATIO = 0.05
HELPERS = (PROBE, Path(__file__).with_name("_triton_probe.py"))  # the probe packs its reply with 07's
NULL_KERNEL = Path(__file__).with_name("_triton_null_decode.py")


def _null_subject(sub):
    """A second subject whose file is a kernel that computes nothing: the round trip without a kernel."""
    proxy = SubmissionProxy(roundtrip.calibration_subject(sub._subject, NULL_KERNEL, ["flash_decode"]))
    for helper in HELPERS:
        proxy.use_helper(helper)
    return proxy


def _round_trips(proxy, spec: dict, seeds, check=None) -> float:
    """Median ms of whole calls (request, q drawn from the seed, kernel, o back), timed here in the
    trusted process; `check(seed, outcome)` sees every output outside the timed part."""
    def call(seed):
        return proxy.flash_decode.observe(helper={"module": PROBE.stem, "entry": "seeded",
                                                  "spec": dict(spec, q_seed=int(seed))})

    return roundtrip.timed_round_trips(call, list(seeds), check)


def _median_ms(fn) -> float:
    import triton

    fn()
    torch.cuda.synchronize()
    return float(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))


def test_speed(sub, mode):
    """Speed: GB/s of K and V read, against the reference decode kernel"""
    if mode != "gpu":
        note("graded under the Triton interpreter on small fp32 shapes: correctness only")
        pytest.skip("speed not measured: no CUDA GPU here; the Triton interpreter checks correctness only")
    from drill.kernels import decode as reference_module
    from drill.kernels import flash_decode as reference_decode

    from drill.kernels.benchmarks import speed_of_light as sol

    from . import _decode_probe as probe

    reference_module.FORCED_CONFIG = (64, 4, 3)  # no tuning inside a graded check: it compiles many configs
    for helper in HELPERS:
        sub.use_helper(helper)
    # Nothing of your file runs while the copy, the reference and the transfer are timed: a kernel
    # or thread left running would slow them and flatter your figure. Closing ends every process
    # of your file (and the calibration's); a call starts it again.
    sub._subject.close()
    ceilings = sol.ceilings()
    note("ceilings measured in this run: " + ceilings.describe())
    copy = ceilings.hbm_bytes_per_s / 1e9
    note(f"speed, {SPEED_DTYPE}, D = {SPEED_D}, GB/s of K and V read (2·B·Hkv·S·D·2 bytes over the time). "
         f"yours: the median wall-clock round trip of {TIMED_CALLS} calls into the sandboxed process running "
         "your file (K/V drawn there once per size, a fresh q from a random seed each call, every output "
         "checked), minus the same for a kernel that computes nothing (calibrated in a clean process); "
         "reference = drill.kernels.flash_decode (do_bench median); copy = a device-to-device copy, read + write")
    note("B Hq/Hkv S | yours | reference | copy | yours/reference | yours/copy")
    slow, impossible = [], []
    judged = 0  # rows out of the transfer's noise
    calibration = _null_subject(sub)
    try:
        for B, Hq, Hkv, S in SPEED_CASES:
            spec = {"B": B, "Hq": Hq, "Hkv": Hkv, "S": S, "D": SPEED_D, "dtype": SPEED_DTYPE, "device": "cuda",
                    "kv_seed": roundtrip.fresh_seeds(1)[0]}
            k, v = probe.draw_cache(spec, "cuda")
            seq_lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
            what = (f"flash_decode(q[{B}x{Hq}x{SPEED_D}] {SPEED_DTYPE}, k_cache/v_cache[{B}x{Hkv}x{S}x{SPEED_D}], "
                    f"seq_lens all {S}) (speed size, drawn in your process from random seeds)")

            def check(seed, outcome, spec=spec, k=k, v=v, seq_lens=seq_lens, what=what):
                seen = outcome.extra.get("observed") or {}
                got = outcome.result
                if not isinstance(got, np.ndarray) or got.shape != (spec["B"], spec["Hq"], SPEED_D):
                    fail(f"{what} must return a {SPEED_DTYPE} tensor o [B, Hq, D] on the GPU", called=what,
                         got=f"{seen.get('type')} {seen.get('dtype', '')} {seen.get('shape', '')}".strip())
                q = probe.draw_q(spec, seed, "cuda")
                want = reference_decode(q, k, v, seq_lens).double().cpu().numpy()
                mine = torch.from_numpy(got).view(getattr(torch, SPEED_DTYPE)).double().numpy()
                close(mine, want, what, atol=2e-2 * float(np.abs(want).max()), what="o")

            seeds = roundtrip.fresh_seeds(TIMED_CALLS + 1)  # the first is a warm-up
            sub._subject.close()
            _round_trips(calibration, spec, seeds[:1])
            transfer = _round_trips(calibration, spec, seeds[1:])
            calibration._subject.close()
            q = probe.draw_q(spec, seeds[0], "cuda")
            reference_ms = _median_ms(lambda q=q, k=k, v=v: reference_decode(q, k, v, seq_lens))
            _round_trips(sub, spec, seeds[:1], check)  # starts your file again: import, compile, K/V drawn
            round_trip = _round_trips(sub, spec, seeds[1:], check)
            kv_gb = 2 * B * Hkv * S * SPEED_D * 2 / 1e9
            yours = kv_gb / (max(round_trip - transfer, 1e-3) * 1e-3)
            reference = kv_gb / (reference_ms * 1e-3)
            if roundtrip.within_noise(round_trip, transfer):  # no figure of yours to show or compare
                note(f"{B} {Hq}/{Hkv} {S} | in noise | {reference:.0f} | {copy:.0f} | n/a | n/a")
            else:
                note(f"{B} {Hq}/{Hkv} {S} | {yours:.0f} | {reference:.0f} | {copy:.0f} | {yours / reference:.2f} | "
                     f"{yours / copy:.2f}")
            note(f"  round trip {round_trip:.3g} ms, of which transfer {transfer:.3g} ms (calibrated)")
            del k, v
            torch.cuda.empty_cache()
            if roundtrip.within_noise(round_trip, transfer):
                note("  (transfer dominates the round trip: this row's figure is not reliable and is not judged)")
                continue
            judged += 1
            light = sol.assess_decode(ceilings, max(round_trip - transfer, 1e-3), B, Hq, Hkv, S, SPEED_D)
            note(f"  speed of light: {light.describe('yours')}; reference at "
                 f"{sol.assess_decode(ceilings, reference_ms, B, Hq, Hkv, S, SPEED_D).share:.0%}")
            if light.impossible:
                impossible.append(f"B={B} Hq/Hkv={Hq}/{Hkv} S={S}: {round_trip - transfer:.3g} ms against an "
                                  f"HBM floor of {light.floors['HBM']:.3g} ms")
            elif yours < MIN_SPEED_RATIO * reference:
                slow.append(f"B={B} Hq/Hkv={Hq}/{Hkv} S={S}: yours {yours:.0f} GB/s, reference {reference:.0f}")
    finally:
        calibration._subject.close()
    roundtrip.require_judged(judged)
    if impossible:
        fail("your kernel's timing is faster than reading the K/V cache once allows: a mismeasurement or a "
             "forged figure, never a pass", called=f"flash_decode on {SPEED_DTYPE} caches at the sizes below",
             got="; ".join(impossible), expected=f"no faster than {1 / sol.IMPOSSIBLE_SHARE:.2g}× the HBM floor")
    if slow:
        fail(f"your kernel reads K and V below {MIN_SPEED_RATIO:g}× the reference kernel's GB/s",
             called=f"flash_decode on {SPEED_DTYPE} caches at the sizes in the table below",
             got="; ".join(slow), expected=f"at least {MIN_SPEED_RATIO:g}× the reference at every size",
             hint="give every SM work: split each sequence's keys so that splits × B × Hq is a few times the "
                  "SM count, and load blocks of 32-128 keys per step (num_warps 4, num_stages 3)")
    note("to go further: one program per (split, sequence, KV head) that loads its group's Hq/Hkv query rows "
         "as one tile reads each K/V byte once instead of once per query head (drill.kernels.flash_decode)")
