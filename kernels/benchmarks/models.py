"""What real models need, beside PyTorch SDPA in the same run: flash_decode with scale= and
return_lse=True against plain flash_decode, flash_attention at head dims 96 and 192 and at
DeepSeek-V3's q/k 192 with v 128 (all three run zero-padded to a power of two), forward and
forward + backward; sliding windows (flash_attention's window_size) against SDPA with a boolean
mask and FlexAttention with a block mask; and a packed batch (flash_attention_varlen) against
the same batch padded, through our dense kernel and SDPA.

    python -m drill.kernels.benchmarks.models      (or suite.py --steps model_features)

Times are do_bench medians (L2 flushed). SDPA's row names the backend that ran: the first of
cuDNN, FLASH and EFFICIENT that takes the shape.
"""

from __future__ import annotations


def _ms(fn) -> float:
    import triton

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _sdpa(q, k, v, gqa: bool = False, causal: bool = False):
    """(backend name, a callable running SDPA on it): the first backend that takes these inputs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FLASH", SDPBackend.FLASH_ATTENTION),
                          ("EFFICIENT", SDPBackend.EFFICIENT_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, is_causal=causal)
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


def _fwd_bwd_ms(fwd, inputs, do) -> tuple[float, float]:
    """(forward ms, backward ms) of fwd(), the backward timed as autograd.grad of its output."""
    import torch

    ms_f = _ms(fwd)
    for t in inputs:
        t.requires_grad_(True)
    try:
        o = fwd()
        ms_b = _ms(lambda: torch.autograd.grad(o, inputs, do, retain_graph=True))
    finally:
        for t in inputs:
            t.requires_grad_(False)
    return ms_f, ms_b


def _sdpa_masked(q, k, v, mask):
    """(backend name, callable) for SDPA with a boolean mask (True: attend): the first of cuDNN and
    EFFICIENT that takes it (FLASH takes no mask)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("EFFICIENT", SDPBackend.EFFICIENT_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        try:
            run()
            return name, run
        except RuntimeError:  # this backend does not take the mask or the shape
            continue
    return None, None


def _flex(q, k, v, left: int | None, causal: bool, log):
    """FlexAttention (compiled) with the window as a block mask, or None where it is missing or fails."""
    import torch

    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def band(b, h, q_idx, kv_idx):
            keep = kv_idx <= q_idx if causal else kv_idx >= 0
            return keep & (q_idx - kv_idx <= left) if left is not None else keep

        S = q.shape[2]
        block_mask = create_block_mask(band, None, None, S, S, device=q.device) if causal or left is not None else None
        flex = torch.compile(flex_attention)
        run = lambda: flex(q, k, v, block_mask=block_mask)  # noqa: E731
        run()
        return run
    except Exception as exc:  # noqa: BLE001 - an optional comparison: say why it is missing
        log(f"FlexAttention unavailable: {type(exc).__name__}: {str(exc)[:200]}")
        return None


def bench_window(log=print, flex: bool = True):
    """Sliding windows, bf16, B = 2, H = 16, S = 8192, D = 128: no mask, causal, and causal windows
    of 1024 and 4096 keys (window_size (left, 0)). TFLOP/s count only the (query, key) pairs inside
    the mask: 4·D per pair forward, 2.5 times that backward."""
    import torch

    from drill.kernels import flash_attention

    B, H, S, D = 2, 16, 8192, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    i = torch.arange(S, device="cuda")[:, None]
    j = torch.arange(S, device="cuda")[None, :]
    out = []
    for label, causal, left in (("none", False, None), ("causal", True, None), ("(1024, 0)", True, 1024),
                                ("(4096, 0)", True, 4096)):
        mask = j <= i if causal else torch.ones(S, S, dtype=torch.bool, device="cuda")
        if left is not None:
            mask = mask & (i - j <= left)
        flop = 4 * B * H * D * int(mask.sum())
        window = (-1, -1) if left is None else (left, 0)
        runs = [("flash_attention", lambda: flash_attention(q, k, v, causal=causal, window_size=window))]
        if left is None:  # no mask or is_causal: SDPA's fastest backends
            backend, sdpa = _sdpa(q, k, v, causal=causal)
        else:  # the window as an explicit [S, S] boolean mask
            backend, sdpa = _sdpa_masked(q, k, v, mask)
        runs.append((f"SDPA {backend}", sdpa))
        if flex:  # compiles a forward and a backward per mask: minutes on a fresh machine
            runs.append(("FlexAttention", _flex(q, k, v, left, causal, log)))
        for name, fwd in runs:
            if fwd is None:
                continue
            ms_f, ms_b = _fwd_bwd_ms(fwd, (q, k, v), do)
            row = {"window": label, "kernel": name, "fwd_ms": ms_f, "bwd_ms": ms_b,
                   "fwd_tflops": flop / ms_f / 1e9, "bwd_tflops": 2.5 * flop / ms_b / 1e9}
            out.append(row)
            log(f"window {label} {name}: fwd {ms_f:.3f} ms ({row['fwd_tflops']:.0f} TFLOP/s), "
                f"bwd {ms_b:.3f} ms ({row['bwd_tflops']:.0f})")
        del mask
    md = [f"Sliding window, bf16, B={B}, H={H}, S={S}, D={D}; TFLOP/s over the pairs inside the mask:", "",
          "| window | kernel | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s |", "|---|---|---|---|---|---|"]
    md += [f"| {r['window']} | {r['kernel']} | {r['fwd_ms']:.3f} | {r['fwd_tflops']:.0f} | {r['bwd_ms']:.3f} | "
           f"{r['bwd_tflops']:.0f} |" for r in out]
    return out, "\n".join(md)


def bench_varlen(log=print):
    """A packed batch: 16 causal sequences of 256-4096 rows (seed 0), bf16, H = 16, D = 128.
    flash_attention_varlen on the packed rows against the same batch right-padded to the longest
    sequence, through flash_attention and SDPA (is_causal: padding keys lie past every real row's
    diagonal, so the real rows' outputs are the same). TFLOP/s count the real causal pairs only, so
    the padded runs show what their padding costs."""
    import torch

    from drill.kernels import flash_attention, flash_attention_varlen

    H, D, N = 16, 128, 16
    lens = torch.randint(256, 4097, (N,), generator=torch.Generator().manual_seed(0)).tolist()
    total, longest = sum(lens), max(lens)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    padded = []
    for t in (q, k, v, do):  # [N, H, longest, D], zeros past each sequence
        p = torch.zeros(N, longest, H, D, device="cuda", dtype=torch.bfloat16)
        for b, n in enumerate(lens):
            p[b, :n] = t[int(cu[b]):int(cu[b]) + n]
        padded.append(p.transpose(1, 2).contiguous())
    pq, pk, pv, pdo = padded
    flop = 4 * H * D * sum(n * (n + 1) // 2 for n in lens)
    backend, sdpa = _sdpa(pq, pk, pv, causal=True)
    runs = [("flash_attention_varlen, packed", (q, k, v), do,
             lambda: flash_attention_varlen(q, k, v, cu, cu, longest, longest, causal=True)),
            ("flash_attention, padded", (pq, pk, pv), pdo, lambda: flash_attention(pq, pk, pv, causal=True)),
            (f"SDPA {backend}, padded", (pq, pk, pv), pdo, sdpa)]
    out = []
    for name, inputs, grad_out, fwd in runs:
        if fwd is None:
            continue
        ms_f, ms_b = _fwd_bwd_ms(fwd, inputs, grad_out)
        row = {"kernel": name, "fwd_ms": ms_f, "bwd_ms": ms_b, "fwd_tflops": flop / ms_f / 1e9,
               "bwd_tflops": 2.5 * flop / ms_b / 1e9}
        out.append(row)
        log(f"varlen {name}: fwd {ms_f:.3f} ms ({row['fwd_tflops']:.0f} TFLOP/s), bwd {ms_b:.3f} ms "
            f"({row['bwd_tflops']:.0f})")
    md = [f"Packed batch, bf16, causal, {N} sequences of {min(lens)}-{longest} rows ({total} in all, padded "
          f"{N * longest}), H={H}, D={D}; TFLOP/s over the real pairs:", "",
          "| kernel | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s |", "|---|---|---|---|---|"]
    md += [f"| {r['kernel']} | {r['fwd_ms']:.3f} | {r['fwd_tflops']:.0f} | {r['bwd_ms']:.3f} | "
           f"{r['bwd_tflops']:.0f} |" for r in out]
    return out, "\n".join(md)


def main() -> int:
    for fn in (bench_decode, bench_head_dims, bench_window, bench_varlen):
        print(fn(log=print)[1] + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
