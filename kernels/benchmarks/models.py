"""What real models need, beside PyTorch SDPA in the same run: flash_decode with scale= and
return_lse=True against plain flash_decode, and flash_attention at head dims 96 and 192 and at
DeepSeek-V3's q/k 192 with v 128 (all three run zero-padded to a power of two), forward and
forward + backward.

    python -m drill.kernels.benchmarks.models      (or suite.py --steps model_features)

Times are do_bench medians (L2 flushed). SDPA's row names the backend that ran: the first of
cuDNN, FLASH and EFFICIENT that takes the shape.
"""

from __future__ import annotations


def _ms(fn) -> float:
    import triton

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _sdpa(q, k, v, gqa: bool = False):
    """(backend name, a callable running SDPA on it): the first backend that takes these inputs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FLASH", SDPBackend.FLASH_ATTENTION),
                          ("EFFICIENT", SDPBackend.EFFICIENT_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        try:
            run()
            return name, run
        except RuntimeError:  # this backend does not take the shape
            continue
    return None, None


def bench_decode(log=print):
    """B = 8, Hq = 32 over Hkv = 8, S = 8192, D = 128 bf16: TB/s of K and V read."""
    import torch

    from drill.kernels import flash_decode

    B, Hq, Hkv, S, D = 8, 32, 8, 8192, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
    tb = 2 * k.numel() * k.element_size() / 1e12
    backend, sdpa = _sdpa(q[:, :, None], k, v, gqa=True)
    rows = [("flash_decode", lambda: flash_decode(q, k, v, lens)),
            ("flash_decode scale=0.05, return_lse=True", lambda: flash_decode(q, k, v, lens, scale=0.05,
                                                                             return_lse=True)),
            (f"SDPA {backend}", sdpa)]
    out = []
    for name, fn in rows:
        ms = _ms(fn)
        out.append({"kernel": name, "ms": ms, "tbs": tb / (ms * 1e-3)})
        log(f"decode {name}: {ms * 1e3:.1f} us, {out[-1]['tbs']:.2f} TB/s")
    md = [f"Decode, bf16, B={B}, Hq={Hq}, Hkv={Hkv}, S={S}, D={D} (contiguous cache):", "",
          "| kernel | µs | TB/s of K/V |", "|---|---|---|"]
    md += [f"| {r['kernel']} | {r['ms'] * 1e3:.1f} | {r['tbs']:.2f} |" for r in out]
    return out, "\n".join(md)


def bench_head_dims(log=print):
    """bf16, B = 2, H = 16, S = 8192, not causal; TFLOP/s count 2·B·H·S²·(D + Dv) forward and 2.5
    times that for the backward."""
    import torch

    from drill.kernels import flash_attention

    B, H, S = 2, 16, 8192
    out = []
    for d, dv in ((96, 96), (192, 192), (192, 128)):
        g = torch.Generator(device="cuda").manual_seed(d + dv)
        q, k = (torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        v = torch.randn(B, H, S, dv, device="cuda", dtype=torch.bfloat16, generator=g)
        do = torch.randn(B, H, S, dv, device="cuda", dtype=torch.bfloat16, generator=g)
        flop = 2 * B * H * S * S * (d + dv)
        backend, sdpa = _sdpa(q, k, v)
        for name, fwd in (("flash_attention", lambda: flash_attention(q, k, v)), (f"SDPA {backend}", sdpa)):
            if fwd is None:
                continue
            ms_f = _ms(fwd)
            for t in (q, k, v):
                t.requires_grad_(True)
            o = fwd()
            ms_b = _ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            for t in (q, k, v):
                t.requires_grad_(False)
            row = {"d": d, "dv": dv, "kernel": name, "fwd_ms": ms_f, "bwd_ms": ms_b,
                   "fwd_tflops": flop / ms_f / 1e9, "bwd_tflops": 2.5 * flop / ms_b / 1e9}
            out.append(row)
            log(f"D={d} Dv={dv} {name}: fwd {ms_f:.3f} ms ({row['fwd_tflops']:.0f} TFLOP/s), "
                f"bwd {ms_b:.3f} ms ({row['bwd_tflops']:.0f})")
    md = [f"flash_attention, bf16, B={B}, H={H}, S={S}, not causal (ours zero-padded to a power of two):", "",
          "| D | Dv | kernel | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['d']} | {r['dv']} | {r['kernel']} | {r['fwd_ms']:.3f} | {r['fwd_tflops']:.0f} | "
           f"{r['bwd_ms']:.3f} | {r['bwd_tflops']:.0f} |" for r in out]
    return out, "\n".join(md)


def main() -> int:
    for fn in (bench_decode, bench_head_dims):
        print(fn(log=print)[1] + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
