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


def _scaled_mm_tflops(n: int = 8192) -> float:
    """A large e4m3 matrix product through torch._scaled_mm: the FP8 rate this machine reaches."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda", generator=g).to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device="cuda")
    ms = _median_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    return 2 * n ** 3 / ms * 1e-9



def bench_fp8(ds=(64, 128), seqs=(4096, 16384), tokens: int = 16384, causals=(False, True),
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
        kernels = {"triton": None, **{f"gluon #{i}": c for i, c in enumerate(gluon_fwd.CANDIDATES[d])}}
        plan_name = next((n for n, c in kernels.items() if c == plan), "plan")
        kernels.setdefault(plan_name, plan)
        tf, errors = {}, {}
        with torch.no_grad():
            for name, cfg in kernels.items():
                try:
                    x = fp8.prepare(q, k, v, cfg=cfg)
                    tf[name] = fl_ / _median_ms(lambda: dispatch.fp8_forward(x, causal, scale)) * 1e-9
                except Exception as exc:  # a config that does not compile or fit
                    errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
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
            f"{n} {tf[n]:.0f}" if n in tf else f"{n} failed ({errors[n]})" for n in kernels))
        log(every[-1])
        del q, k, v
        torch.cuda.empty_cache()
    lines += ["", "Every kernel alone, TFLOP/s (gluon #i: gluon_fwd.CANDIDATES[D][i] with FP8=True):", ""] + every
    return rows, "\n".join(lines)


def main() -> int:
    print(bench_fp8()[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
