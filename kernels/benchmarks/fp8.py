"""The FP8 forward (drill.kernels.flash_attention_fp8) against SDPA cuDNN in bf16: speed per kernel,
the share of the FP8 peak, and the error against fp32 attention with and without incoherent processing.

Run on a GPU through suite.py (`--steps fp8_bench`) or `python -m drill.kernels.benchmarks.fp8`.
"""

from __future__ import annotations

import math
from typing import Callable

from drill.kernels.benchmarks.common import median_ms as _median_ms
from drill.kernels.benchmarks.training import _inputs, _sdpa_gqa, bench_cases, flops

H200_FP8_PEAK = 1979.0  # dense e4m3 TFLOP/s, NVIDIA's H200 SXM datasheet (3958 is with sparsity)


# Gluon configs tried at a head dim the plan does not take yet (the Gluon kernels' scope is D = 64
# and 128): whether they compile and what they reach decides whether the plan should.
# (At D = 256 a 128-key stage of e4m3 K and Vᵀ makes 263 KB of shared memory, over sm_90's 227 KB.)
GLUON_TRIALS = {256: [dict(BLOCK_M=128, BLOCK_N=64, STAGES=2, num_warps=4, maxnreg=None, PARTS=2, PERSISTENT=False),
                      dict(BLOCK_M=128, BLOCK_N=64, STAGES=2, num_warps=4, maxnreg=None, PARTS=2, PERSISTENT=True)]}


def _scaled_mm_tflops(n: int = 8192) -> float:
    """A large e4m3 matrix product through torch._scaled_mm: the FP8 rate this machine reaches."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda", generator=g).to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device="cuda")
    ms = _median_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    return 2 * n ** 3 / ms * 1e-9



def bench_fp8(ds=(64, 128, 256), seqs=(4096, 16384), tokens: int = 16384, causals=(False, True),
              log: Callable[[str], None] = print) -> tuple[list[dict], str]:
    """The FP8 forward (kernels/fp8.py) against SDPA cuDNN in bf16, same inputs, one run:
    TFLOP/s of each kernel alone (inputs quantised beforehand, as a model that keeps FP8
    activations would call it): the plan's (dispatch.fp8_plan), the Triton kernel and every
    config of gluon_fwd.CANDIDATES with FP8=True; the plan's with the quantisation, and the quantisation
    alone; the share of the datasheet's FP8 peak and of a measured e4m3 matmul; and the error
    against fp32 attention on one head pair (relative Frobenius), plain, with incoherent
    processing, and cuDNN bf16's for scale."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import dispatch, fp8, gluon_fwd

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    mm = _scaled_mm_tflops()
    rows, every = [], []
    lines = [f"e4m3 matmul (torch._scaled_mm, 8192³): {mm:.0f} TFLOP/s; datasheet dense FP8 peak {H200_FP8_PEAK:.0f}.",
             "", "| D | S | mask | plan's kernel | TFLOP/s | with quantisation | quantisation ms | cuDNN bf16 | "
             "plan / cuDNN | plan / peak | plan / matmul | error FP8 | error FP8 incoherent | error cuDNN bf16 |",
             "|" + "---|" * 14]

    def rel(o, ref):
        return ((o.float() - ref).norm() / ref.norm()).item()

    for case in bench_cases(ds, seqs, tokens, causals):
        d, s, b, h, causal = case["d"], case["s"], case["b"], case["h"], case["causal"]
        q, k, v = _inputs(b, h, h, s, d, torch.bfloat16, "bhsd", s + d + causal)
        scale = 1.0 / math.sqrt(d)
        fl_ = flops(b, h, s, d, causal, "fwd")
        plan = dispatch.fp8_plan(q, k, causal)
        kernels = {"triton": None, **{f"gluon #{i}": c for i, c in enumerate(gluon_fwd.CANDIDATES.get(d, ()))},
                   **{f"gluon trial #{i}": c for i, c in enumerate(GLUON_TRIALS.get(d, ()))}}
        plan_name = next((n for n, c in kernels.items() if c == plan), "plan")
        kernels.setdefault(plan_name, plan)
        tf, errors, apart, first = {}, {}, {}, None
        with torch.no_grad():
            for name, cfg in kernels.items():
                try:
                    x = fp8.prepare(q, k, v, cfg=cfg)
                    o = dispatch.fp8_forward(x, causal, scale)[0]
                    first = o if first is None else first  # the Triton kernel's, the first to run
                    # Kernels with other blocks round to e4m3 differently (3-6e-2 apart, FP8's own error
                    # against fp32); one computing something else lands near 1.
                    apart[name] = rel(o, first.float())
                    tf[name] = fl_ / _median_ms(lambda: dispatch.fp8_forward(x, causal, scale)) * 1e-9
                except Exception as exc:  # a config that does not compile or fit
                    errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            if plan_name not in tf:  # the plan's own kernel does not run this shape: nothing to compare
                rows.append({**case, "plan": plan_name, "tflops": tf, "failed": errors})
                lines.append(f"| {d} | {s // 1024}k | {'causal' if causal else 'none'} | {plan_name}: "
                             f"{errors.get(plan_name, 'failed')} |" + " |" * 10)
                log(lines[-1])
                continue
            x = dispatch.fp8_prepare(q, k, v, causal)
            quant_ms = _median_ms(lambda: dispatch.fp8_prepare(q, k, v, causal))
            tf["quantised"] = fl_ / _median_ms(lambda: dispatch.flash_attention_fp8(q, k, v, causal, scale)) * 1e-9
            tf["cudnn"] = fl_ / _median_ms(lambda: cudnn(q, k, v, causal, scale)) * 1e-9
            part = [t[:1, :2] for t in (q, k, v)]  # fp32 attention over 2 heads: S² scores fit easily
            scores = part[0].float() @ part[1].float().transpose(-1, -2) * scale  # full fp32 (no TF32)
            if causal:
                scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            ref = torch.softmax(scores, -1) @ part[2].float()
            del scores
            err = {"fp8": rel(dispatch.fp8_forward(x, causal, scale)[0][:1, :2], ref),
                   "incoherent": rel(dispatch.flash_attention_fp8(*part, causal, scale, incoherent=True), ref),
                   "cudnn": rel(cudnn(*part, causal, scale), ref)}
        del x
        ours = tf[plan_name]
        rows.append({**case, "plan": plan_name, "tflops": tf, "quant_ms": quant_ms, "errors": err, "failed": errors,
                     "matmul": mm})
        lines.append(f"| {d} | {s // 1024}k | {'causal' if causal else 'none'} | {plan_name} | {ours:.0f} | "
                     f"{tf['quantised']:.0f} | {quant_ms:.3f} | {tf['cudnn']:.0f} | {ours / tf['cudnn']:.2f} | "
                     f"{ours / H200_FP8_PEAK:.2f} | {ours / mm:.2f} | {err['fp8']:.2e} | "
                     f"{err['incoherent']:.2e} | {err['cudnn']:.2e} |")
        log(lines[-1])
        every.append(f"- D = {d}, {s // 1024}k, {'causal' if causal else 'no mask'}: " + ", ".join(
            f"{n} {tf[n]:.0f}" + (f" (differs from triton by {apart[n]:.1e})" if apart.get(n, 0) > 0.2 else "")
            if n in tf else f"{n} failed ({errors[n]})" for n in kernels))
        log(every[-1])
        del q, k, v
        torch.cuda.empty_cache()
    lines += ["", "Every kernel alone, TFLOP/s (gluon #i: gluon_fwd.CANDIDATES[D][i] with FP8=True):", ""] + every
    return rows, "\n".join(lines)


# FlashAttention-3's Table 3 (Shah et al. 2024, §4.3, H100): RMSE of the attention output against an
# FP64 reference, inputs N(0, 1) with 0.1 % of entries N(0, 100) (outliers, as LLM activations have).
# Only the two rows checked against a second source (the 2.6x of its abstract is their ratio).
FA3_TABLE3 = {"baseline FP8": 2.4e-2, "FlashAttention-3 FP8": 9.1e-3}


def outlier_inputs(shape, generator, device) -> tuple:
    """q, k, v float32 as in FA3 §4.3: N(0, 1) entries, 0.1 % of them drawn from N(0, 100) instead."""
    import torch

    def one():
        x = torch.randn(shape, device=device, generator=generator)
        wild = torch.rand(shape, device=device, generator=generator) < 1e-3
        return torch.where(wild, 10 * torch.randn(shape, device=device, generator=generator), x)

    return one(), one(), one()


def exact_attention(q, k, v, scale: float):
    """softmax(q kᵀ·scale) v in float64, one head at a time (the RMSE's reference)."""
    import torch

    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = q[b, h].double() @ k[b, h].double().T * scale
            out[b, h] = torch.softmax(s, -1) @ v[b, h].double()
    return out


def baseline_fp16(q, k, v, scale: float):
    """Attention as three separate fp16 steps (FA3's FP16 baseline): S and P materialised in fp16."""
    import torch

    s = (q.half() @ k.half().transpose(-1, -2)) * scale
    return torch.softmax(s, -1) @ v.half()


def baseline_fp8(q, k, v, scale: float):
    """FA3's FP8 baseline: one scale per tensor for q, k, v and P (P's largest value maps to e4m3's
    448), products accumulated in fp32, the softmax in fp16."""
    import torch

    from drill.kernels.fp8 import E4M3_MAX

    def per_tensor(x):
        s = x.abs().amax().clamp_min(1e-12) / E4M3_MAX
        return (x / s).to(torch.float8_e4m3fn).float() * s

    q8, k8, v8 = (per_tensor(t.float()) for t in (q, k, v))
    p = torch.softmax((q8 @ k8.transpose(-1, -2) * scale).half(), -1)
    return per_tensor(p.float()) @ v8


def rmse(o, ref) -> float:
    return float((o.double() - ref).pow(2).mean().sqrt())


def fp8_accuracy(b: int = 1, h: int = 8, s: int = 4096, ds=(128, 256), log: Callable[[str], None] = print
                 ) -> tuple[list[dict], str]:
    """FA3's numerical-error test on our kernels, beside its Table 3: RMSE against FP64 attention of the
    same fp16-rounded inputs (so only the kernel's arithmetic counts), for the FP16 baselines and
    kernels and for FP8 with and without incoherent processing. Our FP8 always quantises per block."""
    import torch
    from torch.nn.attention import SDPBackend

    from drill.kernels import flash_attention, flash_attention_fp8

    cudnn = _sdpa_gqa(SDPBackend.CUDNN_ATTENTION)
    rows = []
    for d in ds:
        g = torch.Generator(device="cuda").manual_seed(d)
        q, k, v = (t.half() for t in outlier_inputs((b, h, s, d), g, "cuda"))
        scale = 1.0 / math.sqrt(d)
        ref = exact_attention(q, k, v, scale)
        runs = {"baseline FP16": lambda: baseline_fp16(q, k, v, scale),
                "SDPA cuDNN FP16": lambda: cudnn(q, k, v, False, scale),
                "ours FP16 (flash_attention)": lambda: flash_attention(q, k, v, sm_scale=scale),
                "baseline FP8": lambda: baseline_fp8(q, k, v, scale),
                "ours FP8, block quantisation": lambda: flash_attention_fp8(q, k, v, sm_scale=scale),
                "ours FP8, block quantisation + incoherent processing":
                    lambda: flash_attention_fp8(q, k, v, sm_scale=scale, incoherent=True)}
        for name, fn in runs.items():
            with torch.no_grad():
                try:
                    err = rmse(fn(), ref)
                except Exception as exc:  # a head dim a kernel does not take
                    err, name = None, f"{name} ({type(exc).__name__})"
            rows.append({"d": d, "kernel": name, "rmse": err})
            log(f"D={d} {name}: {err}")
        del q, k, v, ref
        torch.cuda.empty_cache()
    lines = [f"FlashAttention-3's error test (§4.3): q, k, v of [{b}, {h}, {s}, D], entries N(0, 1) with 0.1 % "
             "drawn from N(0, 100), rounded to fp16; RMSE of the output against FP64 attention of the same values.",
             "", "| kernel | " + " | ".join(f"RMSE, D = {d}" for d in ds) + " |", "|---|" + "---|" * len(ds)]
    for name in dict.fromkeys(r["kernel"] for r in rows):
        cells = [next((f"{r['rmse']:.2e}" for r in rows if r["kernel"] == name and r["d"] == d
                       and r["rmse"] is not None), "n/a") for d in ds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "FA3's Table 3 (H100, its own kernels), for comparison: " + "; ".join(
        f"{n} {e:.1e}" for n, e in FA3_TABLE3.items()) + "."]
    return rows, "\n".join(lines)


def main() -> int:
    print(bench_fp8()[1])
    print(fp8_accuracy()[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
