"""Training attention: the reference FlashAttention (forward and backward) against PyTorch's kernels.

Every row times each implementation on the same inputs (one shape, one mask, one pass):

  ours        drill.kernels.flash_attention (the dispatcher's pick: Triton, or Gluon on Hopper)
  cudnn       F.scaled_dot_product_attention pinned to SDPBackend.CUDNN_ATTENTION
  flash       ... pinned to SDPBackend.FLASH_ATTENTION (PyTorch's FlashAttention-2)
  efficient   ... pinned to SDPBackend.EFFICIENT_ATTENTION (memory-efficient, xformers-style)
  flex        torch.nn.attention.flex_attention.flex_attention under torch.compile
  user        a user's flash_attention(q, k, v, causal, sm_scale) from a file, forward only: timed
              by `drill bench --kernel` through the grader's sandboxed subject
              (drill/grader/bench_user.py) and handed to bench_table; never imported here

TFLOP/s counts 4*B*H*S^2*D for the forward (half of it when causal) and 2.5 times that for
the backward; times are triton.testing.do_bench medians (L2 flushed between runs), the better
of two rounds that alternate the implementations, except the user's: round trip minus
calibrated transfer (bench_user.METHOD). The backward is timed alone: autograd.grad on a graph
kept from one forward.

Besides the main table: GQA against SDPA's enable_gqa, the [B, S, H, D] layout, fp32 accuracy,
the Gluon forward's configs, the backward's plans and kernels, host cost at S = 1k, and the
launch-config sweep. Used by benchmarks/suite.py and by `drill bench`; run directly with
`python -m drill.kernels.benchmarks.training [--quick]`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Callable

from drill.kernels.benchmarks.common import graph_ms, host_us
from drill.kernels.benchmarks.common import median_ms as _median_ms

IMPLS = ("ours", "cudnn", "flash", "efficient", "flex", "user")
LABELS = {
    "ours": "ours (tuned: Triton or Gluon)",
    "cudnn": "SDPA cuDNN",
    "flash": "SDPA FLASH",
    "efficient": "SDPA EFFICIENT",
    "flex": "FlexAttention",
    "user": "yours (round trip − transfer)",
}
HEADS = {32: 64, 64: 32, 128: 16, 256: 8}  # H * D = 2048: a model width that fills the GPU


def flops(b: int, h: int, s: int, d: int, causal: bool, pass_: str) -> float:
    f = 4.0 * b * h * s * s * d
    if causal:
        f /= 2
    return f * (2.5 if pass_ == "bwd" else 1.0)


def bench_cases(ds=(64, 128), seqs=(1024, 4096, 16384), tokens: int = 16384, causals=(False, True)) -> list[dict]:
    """The table's sizes, in its order: one {"d", "s", "b", "h", "causal"} per (head dim, S, mask)."""
    return [{"d": d, "s": s, "b": max(1, tokens // s), "h": HEADS.get(d, max(1, 2048 // d)), "causal": causal}
            for d in ds for s in seqs for causal in causals]


def _implementations() -> dict[str, Callable]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from drill.kernels import flash_attention

    def sdpa(backend):
        def run(q, k, v, causal, scale):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return run

    impls: dict[str, Callable] = {
        "ours": lambda q, k, v, causal, scale: flash_attention(q, k, v, causal=causal, sm_scale=scale),
        "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
    }
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        # one compile per shape, mask and grad mode: 24 graphs here, past dynamo's default limit
        # of 8 (beyond it flex_attention silently runs unfused and materialises S x S scores)
        import torch._dynamo
        import torch._functorch.config

        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 256))
        if hasattr(torch._dynamo.config, "accumulated_recompile_limit"):
            torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 2048)
        # the backward is timed by replaying autograd.grad(retain_graph=True): no donated buffers
        if hasattr(torch._functorch.config, "donated_buffer"):
            torch._functorch.config.donated_buffer = False
        compiled = torch.compile(flex_attention, dynamic=False)
        masks: dict = {}

        def flex(q, k, v, causal, scale):
            mask = None
            if causal:
                key = (q.shape[2], k.shape[2], str(q.device))
                if key not in masks:
                    shift = k.shape[2] - q.shape[2]
                    masks[key] = create_block_mask(lambda b, h, i, j: j <= i + shift, None, None,
                                                   q.shape[2], k.shape[2], device=q.device)
                mask = masks[key]
            return compiled(q, k, v, block_mask=mask, scale=scale)

        impls["flex"] = flex
    except Exception:  # older torch: no FlexAttention
        pass
    return impls


def _time_impl(fn, q, k, v, causal, scale, pass_, ref_o):
    """(ms, max |o - ref|) for one implementation; raises if it cannot run."""
    import torch

    if pass_ == "fwd":
        with torch.no_grad():
            o = fn(q, k, v, causal, scale)  # compiles / tunes outside the timed region
            err = float((o.float() - ref_o).abs().max()) if ref_o is not None else float("nan")
            ms = _median_ms(lambda: fn(q, k, v, causal, scale))
        return ms, err
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    o = fn(qg, kg, vg, causal, scale)
    if o.grad_fn is None:
        raise NotImplementedError("forward only (no backward to time)")
    do = torch.randn_like(o)
    torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)  # compile / tune
    ms = _median_ms(lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True))
    return ms, float("nan")


def bench_table(ds=(64, 128), seqs=(1024, 4096, 16384), tokens: int = 16384, causals=(False, True),
                passes=("fwd", "bwd"), dtype: str = "bfloat16", impls=IMPLS, user: dict | None = None,
                rounds: int = 2, log: Callable[[str], None] = print) -> list[dict]:
    """Run the table; one dict per (head dim, S, mask, pass) with ms and TFLOP/s per implementation.

    Each row times its implementations `rounds` times in turn and keeps each one's fastest median:
    single rows have read 40 % low on this H200 for one implementation and not the others, in
    runs where the same call timed normally minutes before (kernels/NOTES.md).

    user: the user's kernel already timed, {(d, s, causal): result} from bench_user.time_user_kernel
    (forward rows only; its backward rows leave the column empty).
    """
    import torch

    dt = getattr(torch, dtype)
    all_impls = _implementations()
    names = [n for n in impls if n in all_impls or (n == "user" and user is not None)]
    from drill.kernels.benchmarks import speed_of_light

    light = speed_of_light.ceilings() if "fwd" in passes else None
    rows = []
    for d in ds:
        h = HEADS.get(d, max(1, 2048 // d))
        for s in seqs:
            b = max(1, tokens // s)
            gen = torch.Generator(device="cuda").manual_seed(1234 + d + s)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dt, generator=gen) for _ in range(3))
            scale = 1.0 / math.sqrt(d)
            for causal in causals:
                with torch.no_grad(), torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
                                                                     torch.nn.attention.SDPBackend.FLASH_ATTENTION]):
                    ref_o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
                for pass_ in passes:
                    row = {"d": d, "s": s, "b": b, "h": h, "causal": causal, "pass": pass_, "dtype": dtype,
                           "ms": {}, "tflops": {}, "max_err_vs_sdpa": {}, "errors": {}}
                    fl = flops(b, h, s, d, causal, pass_)
                    if "user" in names:
                        _user_figures(row, (user or {}).get((d, s, causal)), fl)
                    for _ in range(rounds):  # interleaved, so a passing disturbance hits one round
                        for name in names:
                            if name == "user" or name in row["errors"]:
                                continue
                            try:
                                ms, err = _time_impl(all_impls[name], q, k, v, causal, scale, pass_, ref_o)
                                if ms < row["ms"].get(name, math.inf):
                                    row["ms"][name], row["tflops"][name] = ms, fl / ms * 1e-9
                                if not math.isnan(err):
                                    row["max_err_vs_sdpa"][name] = err
                            except Exception as exc:  # a backend that does not support the case
                                row["errors"][name] = (f"{type(exc).__name__}: "
                                                       f"{str(exc).splitlines()[0][:160] if str(exc) else ''}")
                            torch.cuda.synchronize()
                    if pass_ == "fwd":
                        _light_figures(row, light)
                    t = row["tflops"]
                    for base in ("cudnn", "flash"):
                        if "ours" in t and base in t:
                            row[f"ours/{base}"] = t["ours"] / t[base]
                        if "user" in t and base in t:
                            row[f"user/{base}"] = t["user"] / t[base]
                    rows.append(row)
                    log(format_row(row, names))
            del q, k, v
            torch.cuda.empty_cache()
    return rows


def _light_figures(row: dict, light) -> None:
    """row["light"]: the forward's floors on this GPU, the ceiling that binds and each
    implementation's share of it (speed_of_light.py). A user's timing faster than the floor
    is a measurement error or a forged figure: it leaves the table, with that reason."""
    from drill.kernels.benchmarks import speed_of_light

    elem = 4 if row["dtype"] == "float32" else 2
    shares = {}
    for name, ms in row["ms"].items():
        a = speed_of_light.assess(light, ms, row["b"], row["h"], row["s"], row["d"], row["causal"], elem)
        shares[name] = a.share
    a = speed_of_light.assess(light, 1.0, row["b"], row["h"], row["s"], row["d"], row["causal"], elem)
    row["light"] = {"floors_ms": a.floors, "binding": a.binding, "share": shares}
    if "user" in shares and shares["user"] > 1 / speed_of_light.IMPOSSIBLE_SHARE:
        row["errors"]["user"] = (f"timed at {row['ms']['user']:.3g} ms, faster than the {a.binding} floor of "
                                 f"{a.floors[a.binding]:.3g} ms: a measurement error, not a figure")
        del row["ms"]["user"], row["tflops"]["user"], shares["user"]


def _user_figures(row: dict, result: dict | None, fl: float) -> None:
    """The user's forward figures (timed beforehand in the sandbox) into a row of the table.

    Where the transfer is over half the round trip, the difference is within the transfer's
    noise: the row keeps both round trips and gets no ms or TFLOP/s (shown as "in noise").
    """
    if row["pass"] != "fwd" or result is None:
        return
    if result.get("error"):
        row["errors"]["user"] = result["error"]
        return
    row["max_err_vs_sdpa"]["user"] = result["max_err"]
    row["user_round_trip"] = {k: result[k] for k in ("round_trip_ms", "transfer_ms", "within_noise", "calls")}
    if not result["within_noise"]:
        row["ms"]["user"] = result["ms"]
        row["tflops"]["user"] = fl / result["ms"] * 1e-9


def user_in_noise(row: dict) -> bool:
    """Whether the user's kernel was timed in this row but its time is within the transfer's noise."""
    return bool(row.get("user_round_trip", {}).get("within_noise"))


def warm_flex(ds=(64, 128), seqs=(1024, 4096, 16384), tokens: int = 16384, causals=(False, True),
              dtype: str = "bfloat16", log: Callable[[str], None] = print) -> None:
    """Compile FlexAttention (forward and backward) for every benchmark shape, once.

    Meant to run in a separate process while the tests run: torch.compile's caches are on
    disk, so the timing process later finds the kernels built."""
    import torch

    flex = _implementations().get("flex")
    if flex is None:
        log("warm_flex: no FlexAttention in this torch")
        return
    dt = getattr(torch, dtype)
    for d in ds:
        h = HEADS.get(d, max(1, 2048 // d))
        for s in seqs:
            b = max(1, tokens // s)
            for causal in causals:
                t0 = time.time()
                try:
                    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
                    o = flex(q, k, v, causal, 1.0 / math.sqrt(d))
                    torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
                    with torch.no_grad():
                        flex(q.detach(), k.detach(), v.detach(), causal, 1.0 / math.sqrt(d))
                    torch.cuda.synchronize()
                    log(f"warm_flex D={d} S={s} causal={causal}: {time.time() - t0:.1f}s")
                except Exception as exc:
                    log(f"warm_flex D={d} S={s} causal={causal}: failed {type(exc).__name__}: {exc}")


def format_row(row: dict, names) -> str:
    t = row["tflops"]
    cells = " ".join(f"{n}={t[n]:.0f}" if n in t else f"{n}=n/a" for n in names)
    ratios = " ".join(f"{k}={row[k]:.2f}" for k in row if k.startswith(("ours/", "user/")))
    return (f"D={row['d']} S={row['s']} B={row['b']} H={row['h']} {'causal' if row['causal'] else 'full'} "
            f"{row['pass']}: {cells} | {ratios}")


def table_columns(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(implementations that ran or failed in any row, ratio keys present in any row)."""
    present = [n for n in IMPLS if any(n in r["tflops"] or n in r["errors"] or (n == "user" and user_in_noise(r))
                                       for r in rows)]
    ratio_keys = [k for k in ("ours/cudnn", "ours/flash", "user/cudnn", "user/flash") if any(k in r for r in rows)]
    return present, ratio_keys


def to_markdown(rows: list[dict]) -> str:
    """One markdown table: TFLOP/s per implementation, then our ratios to cuDNN and FLASH."""
    present, ratio_keys = table_columns(rows)
    head = ["D", "S", "B×H", "mask", "pass"] + [LABELS[n] for n in present]
    head += [k.replace("/", " / ") for k in ratio_keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["d"]), f"{r['s'] // 1024}k" if r["s"] % 1024 == 0 else str(r["s"]), f"{r['b']}×{r['h']}",
                 "causal" if r["causal"] else "none", r["pass"]]
        for n in present:
            cells.append(f"{r['tflops'][n]:.0f}" if n in r["tflops"] else
                         "in noise" if n == "user" and user_in_noise(r) else "—")
        cells += [f"{r[k]:.2f}" if k in r else "—" for k in ratio_keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- feature tables
#
# GQA against SDPA's enable_gqa, the [B, S, H, D] layout against [B, H, S, D], fp32 accuracy,
# the Gluon forward's configs, the backward's plans and kernels, host cost at S = 1k. Each
# function returns (rows, markdown).


def _inputs(b, h, hkv, s, d, dtype, layout, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(heads):
        if layout == "bshd":
            return torch.randn(b, s, heads, d, device="cuda", dtype=dtype, generator=g).transpose(1, 2)
        return torch.randn(b, heads, s, d, device="cuda", dtype=dtype, generator=g)

    return make(h), make(hkv), make(hkv)


def _sdpa_gqa(backend):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal, scale):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
    return run


def bench_gqa(ds=(64, 128), s: int = 4096, hq: int = 32, hkv: int = 8, tokens: int = 16384, causals=(False, True),
              passes=("fwd", "bwd"), log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """Hq query heads on Hkv key/value heads: ours against SDPA cuDNN and FLASH with enable_gqa=True."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import flash_attention

    impls = {"ours": lambda q, k, v, c, sc: flash_attention(q, k, v, causal=c, sm_scale=sc),
             "cudnn": _sdpa_gqa(SDPBackend.CUDNN_ATTENTION), "flash": _sdpa_gqa(SDPBackend.FLASH_ATTENTION)}
    rows = []
    for d in ds:
        b = max(1, tokens // s)
        q, k, v = _inputs(b, hq, hkv, s, d, torch.bfloat16, "bhsd", 77 + d)
        scale = 1.0 / math.sqrt(d)
        for causal in causals:
            with torch.no_grad():
                ref_o = impls["flash"](q, k, v, causal, scale).float()
            for pass_ in passes:
                row = {"d": d, "s": s, "b": b, "h": hq, "hkv": hkv, "causal": causal, "pass": pass_,
                       "ms": {}, "tflops": {}, "max_err_vs_sdpa": {}, "errors": {}}
                for name, fn in impls.items():
                    try:
                        ms, err = _time_impl(fn, q, k, v, causal, scale, pass_, ref_o)
                        row["ms"][name], row["tflops"][name] = ms, flops(b, hq, s, d, causal, pass_) / ms * 1e-9
                        if not math.isnan(err):
                            row["max_err_vs_sdpa"][name] = err
                    except Exception as exc:
                        row["errors"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                for base in ("cudnn", "flash"):
                    if "ours" in row["tflops"] and base in row["tflops"]:
                        row[f"ours/{base}"] = row["tflops"]["ours"] / row["tflops"][base]
                rows.append(row)
                log("gqa " + format_row(row, list(impls)) + f" err={row['max_err_vs_sdpa']} {row['errors']}")
    md = (f"GQA, Hq/Hkv = {hq}/{hkv}, bf16, B·S = {tokens} tokens; SDPA with enable_gqa=True; FLOPs count the "
          f"{hq} query heads.\n\n" + to_markdown(rows))
    errs = [f"{r['d']}/{'causal' if r['causal'] else 'none'}/{r['pass']}: {r['errors']}" for r in rows if r["errors"]]
    if errs:
        md += "\n\nBackends that refused a case: " + "; ".join(errs)
    return rows, md


def bench_layouts(ds=(64, 128), s: int = 4096, tokens: int = 16384, causals=(False, True), passes=("fwd", "bwd"),
                  log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """Ours and cuDNN on [B, H, S, D] tensors and on [B, S, H, D] memory passed as .transpose(1, 2)."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import flash_attention

    ours = lambda q, k, v, c, sc: flash_attention(q, k, v, causal=c, sm_scale=sc)  # noqa: E731
    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    rows = []
    lines = ["| D | S | B×H | mask | pass | ours [B,H,S,D] | ours [B,S,H,D] | ours S-major / H-major | "
             "cuDNN [B,H,S,D] | cuDNN [B,S,H,D] | ours / cuDNN, [B,S,H,D] |", "|" + "---|" * 11]
    for d in ds:
        h = HEADS.get(d, 16)
        b = max(1, tokens // s)
        data = {lay: _inputs(b, h, h, s, d, torch.bfloat16, lay, 99 + d) for lay in ("bhsd", "bshd")}
        scale = 1.0 / math.sqrt(d)
        for causal in causals:
            for pass_ in passes:
                t = {}
                for lay, (q, k, v) in data.items():
                    for name, fn in (("ours", ours), ("cudnn", cudnn)):
                        try:
                            ms, _ = _time_impl(fn, q, k, v, causal, scale, pass_, None)
                            t[(name, lay)] = flops(b, h, s, d, causal, pass_) / ms * 1e-9
                        except Exception as exc:
                            log(f"layout {name} {lay}: {type(exc).__name__}: {exc}")
                row = {"d": d, "s": s, "b": b, "h": h, "causal": causal, "pass": pass_,
                       "tflops": {f"{n}_{lay}": x for (n, lay), x in t.items()}}
                rows.append(row)
                f = lambda key: f"{t[key]:.0f}" if key in t else "—"  # noqa: E731
                r = lambda a, c: f"{t[a] / t[c]:.3f}" if a in t and c in t else "—"  # noqa: E731
                lines.append(f"| {d} | {s // 1024}k | {b}×{h} | {'causal' if causal else 'none'} | {pass_} | "
                             f"{f(('ours', 'bhsd'))} | {f(('ours', 'bshd'))} | {r(('ours', 'bshd'), ('ours', 'bhsd'))} | "
                             f"{f(('cudnn', 'bhsd'))} | {f(('cudnn', 'bshd'))} | {r(('ours', 'bshd'), ('cudnn', 'bshd'))} |")
                log(lines[-1])
    return rows, "\n".join(lines)


def fp32_accuracy(ds=(64, 128), b: int = 2, h: int = 8, s: int = 2048, causals=(False, True),
                  log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """fp32 inputs: max |error| against float64 (o and the three gradients) and forward TFLOP/s, for
    ours by default (3xTF32), with TF32 allowed and on scalar FMAs, and SDPA EFFICIENT (the fp32 SDPA
    backend)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from drill.kernels import common, triton_fa2
    from drill.kernels import dispatch as fl
    from drill.kernels import flash_attention

    def efficient(q, k, v, c, sc):
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=c, scale=sc)

    ours = lambda q, k, v, c, sc: flash_attention(q, k, v, causal=c, sm_scale=sc)  # noqa: E731
    rows = []
    lines = ["| D | B×H×S | mask | implementation | max err o | max err dq | max err dk | max err dv | fwd TFLOP/s |",
             "|" + "---|" * 9]
    real_tf32, real_prec = triton_fa2._tf32_allowed, triton_fa2._dot_precision
    for d in ds:
        q, k, v = _inputs(b, h, h, s, d, torch.float32, "bhsd", 5 + d)
        do = torch.randn_like(q)
        scale = 1.0 / math.sqrt(d)
        for causal in causals:
            q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
            sc = (q64 @ k64.transpose(-1, -2)) * scale
            if causal:
                sc = sc.masked_fill(torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            o64 = torch.softmax(sc, -1) @ v64
            g64 = torch.autograd.grad(o64, (q64, k64, v64), do.double())
            for label, fn, tf32 in (("ours, fp32 default (3xTF32)", ours, False), ("ours, TF32 allowed", ours, True),
                                    ("ours, scalar FMA (ieee; the default before)", ours, "ieee"),
                                    ("SDPA EFFICIENT", efficient, False)):
                triton_fa2._tf32_allowed = (lambda: True) if tf32 is True else real_tf32
                if tf32 == "ieee":
                    triton_fa2._dot_precision = lambda dtype: "ieee" if dtype == torch.float32 else "tf32"
                try:
                    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
                    o = fn(qg, kg, vg, causal, scale)
                    grads = torch.autograd.grad(o, (qg, kg, vg), do)
                    errs = [float((x.double() - y).abs().max()) for x, y in zip((o.detach(), *grads), (o64.detach(), *g64))]
                    ms, _ = _time_impl(fn, q, k, v, causal, scale, "fwd", None)
                    tf = flops(b, h, s, d, causal, "fwd") / ms * 1e-9
                    rows.append({"d": d, "causal": causal, "impl": label, "errors": errs, "tflops": tf})
                    lines.append(f"| {d} | {b}×{h}×{s} | {'causal' if causal else 'none'} | {label} | "
                                 + " | ".join(f"{e:.2e}" for e in errs) + f" | {tf:.1f} |")
                except Exception as exc:
                    lines.append(f"| {d} | {b}×{h}×{s} | {'causal' if causal else 'none'} | {label} | "
                                 f"failed: {type(exc).__name__}: {str(exc)[:100]} |||||")
                finally:
                    triton_fa2._tf32_allowed, triton_fa2._dot_precision = real_tf32, real_prec
                log(lines[-1])
    return rows, "\n".join(lines)


def bench_short(ds=(64, 128), s: int = 1024, tokens: int = 16384, log: Callable[[str], None] = print
                ) -> tuple[list[dict], str]:
    """S = 1k, where one forward is ~0.2 ms of GPU work: each implementation's host cost per call
    (the GPU left to run behind), its do_bench time eager (as the main table times it) and replayed
    from a CUDA graph (the GPU alone). Eager well under graph means host time leaks into the
    eager figure: do_bench flushes L2 before each call, so the GPU waits whenever a call's host
    work outlasts the flush and the previous call."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import common, triton_fa2
    from drill.kernels import dispatch as fl
    from drill.kernels import flash_attention, gluon_fwd

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    rows = []
    lines = ["| D | mask | implementation | host µs per call | eager TFLOP/s | CUDA graph TFLOP/s | eager / graph |",
             "|" + "---|" * 7]
    for d in ds:
        h = HEADS.get(d, 16)
        b = max(1, tokens // s)
        for causal in (False, True):
            q, k, v = _inputs(b, h, h, s, d, torch.bfloat16, "bhsd", s + d + causal)
            scale = 1.0 / math.sqrt(d)
            ours = lambda: flash_attention(q, k, v, causal=causal, sm_scale=scale)  # noqa: E731
            with torch.no_grad():
                ours()  # tunes: the plan's choice is known after this call
                impls = {"ours (plan)": ours, "SDPA cuDNN": lambda: cudnn(q, k, v, causal, scale)}
                key = next((key for key in fl._FWD_PLAN if key[:2] == (d, causal) and key[-1] == common.bucket(s)), None)
                cfg = fl._FWD_PLAN.get(key)
                if cfg:
                    impls["Gluon config alone"] = lambda: gluon_fwd.forward(q, k, v, causal, scale, cfg)
                fl_ = flops(b, h, s, d, causal, "fwd")
                for name, fn in impls.items():
                    fn()
                    host, eager, graph = host_us(fn), _median_ms(fn), graph_ms(fn)
                    rows.append({"d": d, "causal": causal, "impl": name, "host_us": host, "eager_tflops": fl_ / eager * 1e-9,
                                 "graph_tflops": fl_ / graph * 1e-9, "cfg": cfg})
                    lines.append(f"| {d} | {'causal' if causal else 'none'} | {name} | {host:.0f} | "
                                 f"{fl_ / eager * 1e-9:.0f} | {fl_ / graph * 1e-9:.0f} | {graph / eager:.2f} |")
                    log(lines[-1])
    return rows, "\n".join(lines)


def _triton_forward_only(q, k, v, causal, scale):
    """Our forward with the plan pinned to flash.py's Triton kernel (the Gluon kernels' baseline)."""
    from drill.kernels import common, triton_fa2
    from drill.kernels import dispatch as fl
    from drill.kernels import flash_attention

    saved, fl.FORWARD = fl.FORWARD, "triton"
    try:
        return flash_attention(q, k, v, causal=causal, sm_scale=scale)
    finally:
        fl.FORWARD = saved


def bench_gluon(ds=(64, 128), seqs=(1024, 4096, 16384), tokens: int = 16384, causals=(False, True),
                log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """The Gluon forward (kernels/gluon_fwd.py) against the Triton forward alone (tuned) and SDPA
    cuDNN, in one run, [B, H, S, D] bf16; the error is against cuDNN's output."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import gluon_fwd

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    base = {"cudnn": cudnn, "ours": _triton_forward_only}
    rows = []
    lines = ["| D | S | mask | Gluon TFLOP/s | Triton kernel TFLOP/s | cuDNN TFLOP/s | Gluon / cuDNN | "
             "Triton / cuDNN | Gluon / Triton | Gluon max err vs cuDNN | Gluon config (BLOCK_M, BLOCK_N, stages, "
             "warps, maxnreg, partitions, persistent); every config's TFLOP/s |", "|" + "---|" * 11]
    for case in bench_cases(ds, seqs, tokens, causals):
        d, s, b, h, causal = case["d"], case["s"], case["b"], case["h"], case["causal"]
        q, k, v = _inputs(b, h, h, s, d, torch.bfloat16, "bhsd", s + d + causal)
        scale = 1.0 / math.sqrt(d)
        with torch.no_grad():
            ref = cudnn(q, k, v, causal, scale).float()
        impls = dict(base)
        for i, cfg in enumerate(gluon_fwd.CANDIDATES[d]):  # every Gluon config; the best is the row's
            impls[f"gluon{i}"] = lambda q_, k_, v_, c, sc, cfg=cfg: gluon_fwd.forward(q_, k_, v_, c, sc, cfg)[0]
        tf, errs = {}, {}
        for name, fn in impls.items():
            try:
                ms, errs[name] = _time_impl(fn, q, k, v, causal, scale, "fwd", ref)
            except Exception as exc:  # noqa: BLE001 - a row of the table, not the end of it
                log(f"{name} d={d} s={s} causal={causal}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            tf[name] = flops(b, h, s, d, causal, "fwd") / ms * 1e-9
        tried = {n: t for n, t in tf.items() if n.startswith("gluon") and errs[n] < 5e-2}  # never a fast wrong one
        best = max(tried, key=tried.get) if tried else None
        if best:
            tf["gluon"] = tried[best]
        err = errs.get(best, float("nan"))
        cfg = gluon_fwd.CANDIDATES[d][int(best[5:])] if best else None
        rows.append({**case, "tflops": tf, "gluon_err": err, "gluon_cfg": cfg})

        def ratio(a, c):
            return f"{tf[a] / tf[c]:.2f}" if a in tf and c in tf else "n/a"

        cells = [f"{tf[n]:.0f}" if n in tf else "failed" for n in ("gluon", "ours", "cudnn")]
        lines.append(f"| {d} | {s // 1024}k | {'causal' if causal else 'none'} | " + " | ".join(cells) +
                     f" | {ratio('gluon', 'cudnn')} | {ratio('ours', 'cudnn')} | {ratio('gluon', 'ours')} | {err:.2e} | "
                     f"{tuple(cfg.values()) if cfg else 'n/a'}; {', '.join(f'{t:.0f}' for t in tried.values())} |")
        log(lines[-1])
    return rows, "\n".join(lines)


def bench_short_backward(ds=(64, 128), s: int = 1024, tokens: int = 16384, log: Callable[[str], None] = print
                         ) -> tuple[list[dict], str]:
    """S = 1k causal backward, where our row of the main table has swung between 0.57 and 0.88× cuDNN
    (kernels/NOTES.md): per backward plan and for cuDNN, the host µs per call, the do_bench time
    (as the main table times it) and the GPU time alone (the kernels' time in torch.profiler, 10
    calls). A plan whose host time exceeds its GPU time is host-bound: its eager figure measures
    Python and launches, not the kernels."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import common, triton_fa2
    from drill.kernels import dispatch as fl
    from drill.kernels import flash_attention

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    rows = []
    lines = ["| D | implementation | host µs per call | GPU µs per call | eager TFLOP/s | GPU-only TFLOP/s |",
             "|" + "---|" * 6]
    saved = fl.BACKWARD
    for d in ds:
        h = HEADS.get(d, 16)
        b = max(1, tokens // s)
        q, k, v = _inputs(b, h, h, s, d, torch.bfloat16, "bhsd", s + d)
        do = torch.randn_like(q)
        fl_ = flops(b, h, s, d, True, "bwd")
        scale = 1.0 / math.sqrt(d)
        impls = {f"ours, {plan}": (plan, lambda a, b_, c: flash_attention(a, b_, c, causal=True, sm_scale=scale))
                 for plan in ("split", "hopper", "auto")}
        impls["SDPA cuDNN"] = (saved, lambda a, b_, c: cudnn(a, b_, c, True, scale))
        for name, (plan, fwd) in impls.items():
            fl.BACKWARD = plan
            try:
                qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
                o = fwd(qg, kg, vg)
                grad = lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)  # noqa: E731
                grad()  # tunes outside the timing
                host, eager = host_us(grad), _median_ms(grad)
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        grad()
                    torch.cuda.synchronize()
                gpu_us = sum(ev.device_time for ev in prof.events()
                             if ev.device_type == torch.autograd.DeviceType.CUDA) / 10
            finally:
                fl.BACKWARD = saved
            rows.append({"d": d, "impl": name, "host_us": host, "gpu_us": gpu_us, "eager_tflops": fl_ / eager * 1e-9,
                         "gpu_tflops": fl_ / gpu_us * 1e-6})
            lines.append(f"| {d} | {name} | {host:.0f} | {gpu_us:.0f} | {fl_ / eager * 1e-9:.0f} | "
                         f"{fl_ / gpu_us * 1e-6:.0f} |")
            log(lines[-1])
    return rows, "\n".join(lines)


BWD_PROBE = """
import torch
from drill.kernels import dispatch
dispatch.BACKWARD = {plan!r}
for hkv, causal, s in ((2, False, 1000), (2, True, 1536), (8, True, 4096)):
    for d in (64, 128):
        q = torch.randn(2, 8, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(2, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        dispatch.flash_attention(q, k, v, causal=causal).sum().backward()
torch.cuda.synchronize()
print("ok")
"""
_PROBED: dict = {}


def probe_backward_plan(plan: str, timeout: float = 420.0) -> str | None:
    """Run the `plan` backward (kernels/flash.py, BACKWARD) on a few shapes in a child process
    with a time limit, once per process: None if it finished, else why not. The one-pass plan
    waits on other programs; if that ever hangs on some GPU, this turns it into one failed
    check instead of a suite that never ends."""
    import subprocess

    if plan not in _PROBED:
        try:
            import os

            proc = subprocess.run([sys.executable, "-c", BWD_PROBE.format(plan=plan)], capture_output=True, text=True,
                                  timeout=timeout, env={**os.environ, "DRILL_FLASH_TUNE": "0"})
            _PROBED[plan] = None if proc.returncode == 0 and "ok" in proc.stdout else (
                f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-600:]}")
        except subprocess.TimeoutExpired:
            _PROBED[plan] = f"did not finish in {timeout:.0f} s (a hang in the dQ hand-off?)"
    return _PROBED[plan]


def bwd_variant_configs(d: int, plans=("split", "hopper")) -> dict[str, tuple[str, dict]]:
    """Backward variants timed side by side (kernels/NOTES.md): (plan, configs pinned in
    flash.FORCED_CONFIGS; empty for the tuner's pick), for the plans asked for."""
    from drill.kernels import gluon_bwd

    out = {"split (tuned)": ("split", {}), "onepass (tuned)": ("onepass", {})}
    for kind, cands in (("kv", gluon_bwd.CANDIDATES), ("q", gluon_bwd.Q_CANDIDATES)):
        for cfg in cands.get(d, []):  # the other pass with its first config
            name = (f"Gluon, {'dK/dV' if kind == 'kv' else 'dQ'} {cfg['BLOCK_M']}x{cfg['BLOCK_N']} s{cfg['STAGES']}"
                    + (" reversed" if cfg.get("REVERSE") else ""))
            out[name] = ("hopper", {f"bwd_{kind}_gluon": cfg})
    out["atomic (not deterministic)"] = ("atomic", {})
    return {name: v for name, v in out.items() if v[0] in plans}


def bench_bwd_variants(ds=(64, 128), seqs=(4096, 16384), tokens: int = 16384, causals=(False, True),
                       plans=("split", "hopper"), log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """Backward plans pinned side by side against cuDNN in one run: the two-pass split (7 matmuls per
    score tile), the same two passes in Gluon (each config of each pass), and on request the
    one-pass backward with dQ added in a fixed order (5, deterministic) and atomic dQ (5, not
    deterministic; v7 timed both). Also the largest |dq - dq of split|."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import common, triton_fa2
    from drill.kernels import dispatch as fl
    from drill.kernels import flash_attention

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    ours = lambda q_, k_, v_, c, sc: flash_attention(q_, k_, v_, causal=c, sm_scale=sc)  # noqa: E731
    broken = {plan: probe_backward_plan(plan) for plan in ("onepass", "atomic") if plan in plans}
    for plan, why in broken.items():
        if why:
            log(f"bwd variants: {plan} left out: {why}")
    rows = []
    lines = ["| D | S | mask | variant | ours TFLOP/s | cuDNN TFLOP/s | ours / cuDNN | max |dq − dq split| |",
             "|" + "---|" * 8]
    saved = fl.BACKWARD
    for d in ds:
        h = HEADS.get(d, 16)
        for s in seqs:
            b = max(1, tokens // s)
            for causal in causals:
                q, k, v = _inputs(b, h, h, s, d, torch.bfloat16, "bhsd", s + d + causal)
                scale = 1.0 / math.sqrt(d)
                fl_ = flops(b, h, s, d, causal, "bwd")
                base_tf = fl_ / _time_impl(cudnn, q, k, v, causal, scale, "bwd", None)[0] * 1e-9
                do = torch.randn_like(q)
                dq_split = None
                for name, (plan, pinned) in bwd_variant_configs(d, plans).items():
                    mask = "causal" if causal else "none"
                    if broken.get(plan):
                        lines.append(f"| {d} | {s // 1024}k | {mask} | {name} | left out: probe failed ||||")
                        continue
                    fl.BACKWARD = plan
                    triton_fa2.FORCED_CONFIGS.clear()
                    triton_fa2.FORCED_CONFIGS.update(pinned)
                    try:
                        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
                        dq = torch.autograd.grad(ours(qg, kg, vg, causal, scale), qg, do)[0].float()
                        if dq_split is None and plan == "split":
                            dq_split = dq
                        err = float((dq - dq_split).abs().max()) if dq_split is not None else float("nan")
                        ms, _ = _time_impl(ours, q, k, v, causal, scale, "bwd", None)
                        tf = fl_ / ms * 1e-9
                        rows.append({"d": d, "s": s, "causal": causal, "variant": name, "plan": plan, "cfg": pinned,
                                     "tflops": tf, "cudnn": base_tf, "dq_vs_split": err})
                        lines.append(f"| {d} | {s // 1024}k | {mask} | {name} | {tf:.0f} | {base_tf:.0f} | "
                                     f"{tf / base_tf:.2f} | {err:.2e} |")
                    except Exception as exc:
                        lines.append(f"| {d} | {s // 1024}k | {mask} | {name} | failed: {type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:80] if str(exc) else ''} ||||")
                    finally:
                        fl.BACKWARD = saved
                        triton_fa2.FORCED_CONFIGS.clear()
                    log(lines[-1])
                del q, k, v, do, dq_split
                torch.cuda.empty_cache()
    chosen = {k: v for k, v in fl.tuned_configs().items() if k.startswith(("bwd_onepass", "bwd_kv", "bwd_q"))}
    md = "\n".join(lines) + "\n\nConfigs the tuner chose:\n\n" + "\n".join(f"- {k}: {v}" for k, v in sorted(chosen.items()))
    return rows, md


def bench_bwd_kernels(ds=(64, 128), seqs=(4096, 16384), tokens: int = 16384, causals=(False, True),
                      plans=("split", "hopper"), log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """Where a backward's time goes: GPU µs per kernel (torch.profiler, the median of 5 calls after a
    warm-up) for each plan, next to cuDNN's whole backward."""
    import statistics

    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import common, triton_fa2
    from drill.kernels import dispatch as fl
    from drill.kernels import flash_attention

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    rows = []
    lines = ["| D | S | mask | plan | kernel | µs | share | TFLOP/s of the whole backward | cuDNN TFLOP/s |",
             "|" + "---|" * 9]
    saved = fl.BACKWARD
    for case in bench_cases(ds, seqs, tokens, causals):
        d, s, b, h, causal = case["d"], case["s"], case["b"], case["h"], case["causal"]
        q, k, v = _inputs(b, h, h, s, d, torch.bfloat16, "bhsd", s + d + causal)
        scale = 1.0 / math.sqrt(d)
        fl_ = flops(b, h, s, d, causal, "bwd")
        base_tf = fl_ / _time_impl(cudnn, q, k, v, causal, scale, "bwd", None)[0] * 1e-9
        do = torch.randn_like(q)
        for plan in plans:
            fl.BACKWARD = plan
            try:
                qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
                o = flash_attention(qg, kg, vg, causal=causal, sm_scale=scale)
                torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)  # tunes outside the profile
                per_kernel: dict[str, list[float]] = {}
                for _ in range(5):
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                        torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
                        torch.cuda.synchronize()
                    seen: dict[str, float] = {}
                    for ev in prof.events():
                        if ev.device_type == torch.autograd.DeviceType.CUDA:
                            seen[ev.name] = seen.get(ev.name, 0.0) + ev.device_time
                    for name, us in seen.items():
                        per_kernel.setdefault(name, []).append(us)
                med = {name: statistics.median(v) for name, v in per_kernel.items()}
                total = sum(med.values())
                for name, us in sorted(med.items(), key=lambda x: -x[1]):
                    rows.append({"d": d, "s": s, "causal": causal, "plan": plan, "kernel": name, "us": us})
                    lines.append(f"| {d} | {s // 1024}k | {'causal' if causal else 'none'} | {plan} | {name[:60]} | "
                                 f"{us:.0f} | {us / total:.0%} | {fl_ / total * 1e-6:.0f} | {base_tf:.0f} |")
                    log(lines[-1])
            finally:
                fl.BACKWARD = saved
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows, "\n".join(lines)


# --------------------------------------------------------------------------- launch configs
# `precompile_candidates` compiles every config the tuner may try, in parallel processes, so that a
# table's first call only times (Triton keeps the binaries on disk). `sweep_configs` times every
# config of SWEEP_SPACE per kernel kind, head dim, length and mask: how triton_fa2's candidate lists
# were chosen. Both need a CUDA GPU; suite.py's `sweep` step runs the sweep.

SWEEP_SPACE = {
    "fwd": [dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st, PREFETCH=pf, POLY=poly)
            for bm in (64, 128) for bn in (64, 128) for w in (4, 8) for st in (2, 3) for pf in (False, True)
            for poly in (0, 4) if not (bm == 64 and w == 8)],
    "bwd_kv": [dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st)
               for bm in (32, 64) for bn in (64, 128) for w in (4, 8) for st in (2, 3)],
    "bwd_q": [dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st)
              for bm in (64, 128) for bn in (32, 64) for w in (4, 8) for st in (2, 3)],
}


def _sweep_case_inputs(d, s, tokens, dtype):
    import torch

    h = HEADS.get(d, 16)
    b = max(1, tokens // s)
    g = torch.Generator(device="cuda").manual_seed(d * 7 + s)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=getattr(torch, dtype), generator=g) for _ in range(4))
    return b, h, q, k, v, do


def _sweep_call(kind, cfg, d, s, causal, tokens, dtype, time_it: bool):
    """Run (and optionally time) one kernel kind with one pinned config; returns ms or None."""
    import torch

    from drill.kernels import dispatch, triton_fa2

    b, h, q, k, v, do = _sweep_case_inputs(d, s, tokens, dtype)
    scale = 1.0 / math.sqrt(d)
    triton_fa2.FORCED_CONFIGS.clear()
    triton_fa2.FORCED_CONFIGS.update({kk: triton_fa2._candidates(kk, d)[0] for kk in ("fwd", "bwd_kv", "bwd_q")})
    triton_fa2.FORCED_CONFIGS[kind] = cfg
    try:
        if kind == "fwd":
            fn = lambda: dispatch._forward(q, k, v, causal, scale)  # noqa: E731
        else:
            o, lse = dispatch._forward(q, k, v, causal, scale)
            fn = lambda: dispatch._backward(q, k, v, o, lse, do, None, causal, scale)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        return _median_ms(fn, 10, 40) if time_it else 0.0
    finally:
        triton_fa2.FORCED_CONFIGS.clear()


def _precompile_worker(jobs):
    import os

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    failed = []
    for job in jobs:
        try:
            _sweep_call(*job, time_it=False)
        except Exception as exc:
            failed.append((job, f"{type(exc).__name__}: {str(exc)[:200]}"))
    return failed


def precompile_candidates(ds=(64, 128), causals=(False, True), dtype="bfloat16", workers: int = 12,
                          log: Callable[[str], None] = print, extra: tuple = ()) -> None:
    """Compile every candidate config the tuner may try, in parallel processes (Triton's disk
    cache keeps them), so the serial tuning inside the benchmark only times. extra: more
    (kind, cfg, d, causal) to compile, e.g. the variants a benchmark pins."""
    import multiprocessing as mp

    from drill.kernels import dispatch, triton_fa2

    jobs = [(kind, cfg, d, 4096, causal, 16384, dtype)
            for kind in ("fwd", "bwd_kv", "bwd_q") for d in ds for causal in causals for cfg in triton_fa2._candidates(kind, d)]
    jobs += [(kind, cfg, d, 4096, causal, 16384, dtype) for kind, cfg, d, causal in extra]
    t0 = time.time()
    chunks = [jobs[i::workers] for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        failed = [f for fails in pool.map(_precompile_worker, chunks) for f in fails]
    log(f"precompiled {len(jobs)} candidate configs in {time.time() - t0:.0f}s, {len(failed)} failed")
    for job, msg in failed:
        log(f"  failed: {job[:5]}: {msg}")


def sweep_configs(ds=(64, 128), seqs=(16384,), causals=(False, True), kinds=("fwd", "bwd_kv", "bwd_q"),
                  tokens=16384, dtype="bfloat16", space=None, workers: int = 12,
                  log: Callable[[str], None] = print) -> list[dict]:
    """Time every config of `space` per (kind, D, S, causal). Compiles in parallel processes first."""
    import multiprocessing as mp

    space = space or SWEEP_SPACE
    jobs = [(kind, cfg, d, s, causal, tokens, dtype)
            for kind in kinds for d in ds for causal in causals for cfg in space[kind] for s in seqs[:1]]
    t0 = time.time()
    failed: dict = {}
    if workers > 1:
        chunks = [jobs[i::workers] for i in range(workers)]
        with mp.get_context("spawn").Pool(workers) as pool:
            for fails in pool.map(_precompile_worker, chunks):
                for job, msg in fails:
                    failed[json.dumps(job[:2], sort_keys=True) + str(job[2:5])] = msg
    log(f"sweep: compiled {len(jobs)} variants in {time.time() - t0:.0f}s, {len(failed)} failed")
    results = []
    for kind in kinds:
        for d in ds:
            for causal in causals:
                for s in seqs:
                    timed = []
                    for cfg in space[kind]:
                        try:
                            ms = _sweep_call(kind, cfg, d, s, causal, tokens, dtype, time_it=True)
                        except Exception as exc:
                            timed.append({"cfg": cfg, "ms": None, "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
                            continue
                        timed.append({"cfg": cfg, "ms": ms})
                    ok = sorted([t for t in timed if t["ms"] is not None], key=lambda t: t["ms"])
                    res = {"kind": kind, "d": d, "s": s, "causal": causal, "ranked": ok,
                           "failed": [t for t in timed if t["ms"] is None]}
                    results.append(res)
                    top = ", ".join(f"{cfg_str(t['cfg'])}={t['ms']:.3f}ms" for t in ok[:4])
                    log(f"sweep {kind} D={d} S={s} causal={causal}: {top} ({len(res['failed'])} failed)")
    return results


def cfg_str(cfg: dict) -> str:
    s = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}w{cfg['num_warps']}s{cfg['num_stages']}"
    return s + ("pf" if cfg.get("PREFETCH") else "") + (f"poly{cfg['POLY']}" if cfg.get("POLY") else "")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="D=128 only, S=4k and 16k")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--json", help="write rows here")
    ap.add_argument("--warm-flex", action="store_true", help="only compile FlexAttention for the table's shapes")
    a = ap.parse_args(argv)
    if a.warm_flex:
        warm_flex(**(dict(ds=(128,), seqs=(4096, 16384)) if a.quick else {}))
        return 0
    impls = [n for n in IMPLS if not (a.no_flex and n == "flex")]
    kw = dict(ds=(128,), seqs=(4096, 16384)) if a.quick else {}
    rows = bench_table(impls=impls, **kw)
    print(to_markdown(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
