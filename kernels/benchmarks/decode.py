"""Decode benchmark: drill.kernels.flash_decode against SDPA (cuDNN, FLASH) and FlexAttention.

One query row per sequence, bf16, D = 128, Hkv = 8 and Hq = 32 (and 64): the shapes of the
H200 decode anchors in FLASHATTENTION-FACTS.md. Decode is bound by HBM bandwidth, so the
figure is TB/s of K and V read (2·B·Hkv·S·D·2 bytes over the median time), set against the
datasheet's 4.8 TB/s and the copy bandwidth measured in the same run.

    python -m drill.kernels.benchmarks.decode [--quick] [--no-flex]     # writes $OUT/decode.md
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

DATASHEET_TBS = 4.8
SHAPES = [(1, 8192), (1, 32768), (1, 131072), (8, 8192), (8, 32768), (64, 8192)]  # (batch, context)
HEADS = [(32, 8), (64, 8)]  # (Hq, Hkv)
D = 128
IMPLS = ("ours", "paged", "cudnn", "flash", "flex")
LABELS = {"ours": "ours", "paged": "ours, paged (16)", "cudnn": "SDPA cuDNN", "flash": "SDPA FLASH",
          "flex": "FlexAttention"}


def _median_ms(fn, rep=60) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=rep, return_mode="median"))


def launch_us() -> dict:
    """Host µs per launch of Triton kernels that do nothing, with 1 and with 24 arguments (as many
    as the split kernel's non-constexpr ones): the floor of any Triton call's host cost here."""
    import torch
    import triton

    from drill.kernels.benchmarks.common import host_us

    @triton.jit
    def one(X):
        pass

    @triton.jit
    def many(A, B, C, D, E, F, G, H, I, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o):
        pass

    x = torch.zeros(16, device="cuda")
    ints = list(range(3, 18))
    out = {}
    for name, launch in (("1 argument", lambda: one[(1,)](x)),
                         ("24 arguments", lambda: many[(1,)](*[x] * 9, *ints))):
        launch()
        out[name] = host_us(launch, calls=2000)
    return out


def copy_tbs() -> float:
    """Device-to-device copy of 2 GiB, counting bytes read and written."""
    import torch

    src = torch.empty(2**30, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 2 / (ms * 1e-3) / 1e12


def _spin_up(seconds: float = 1.0) -> None:
    """Matrix products for about a second, so the clocks have left idle before anything is timed."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def _implementations(no_flex: bool):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from drill.kernels import flash_decode

    def sdpa(backend):
        def run(case):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(case["q4"], case["k"], case["v"], enable_gqa=True)[:, :, 0]
        return run

    impls = {
        "ours": lambda c: flash_decode(c["q"], c["k"], c["v"], c["seq_lens"]),
        "paged": lambda c: flash_decode(c["q"], c["k_pages"], c["v_pages"], c["seq_lens"], block_table=c["table"]),
        "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    if not no_flex:
        try:
            import torch._dynamo
            from torch.nn.attention.flex_attention import flex_attention

            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            compiled = torch.compile(flex_attention, dynamic=False)
            impls["flex"] = lambda c: compiled(c["q4"], c["k"], c["v"], enable_gqa=True)[:, :, 0]
        except Exception:  # noqa: BLE001 - an older torch without FlexAttention
            pass
    return impls


def _case(B, S, Hq, Hkv, page=16):
    import torch

    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + S + Hq)
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    # The same keys as a page pool [B·S/page, page, Hkv, D], pages of a sequence scattered.
    pages = B * S // page
    perm = torch.randperm(pages, device="cuda", generator=g)
    k_pages = torch.empty(pages, page, Hkv, D, device="cuda", dtype=torch.bfloat16)
    v_pages = torch.empty_like(k_pages)
    k_pages[perm] = k.view(B, Hkv, S // page, page, D).permute(0, 2, 3, 1, 4).reshape(pages, page, Hkv, D)
    v_pages[perm] = v.view(B, Hkv, S // page, page, D).permute(0, 2, 3, 1, 4).reshape(pages, page, Hkv, D)
    table = perm.view(B, S // page).int()
    return {"q": q, "q4": q[:, :, None], "k": k, "v": v, "k_pages": k_pages, "v_pages": v_pages, "table": table,
            "seq_lens": torch.full((B,), S, dtype=torch.int32, device="cuda")}


def _reference(case):
    """fp32 attention on the upcast inputs, head by head group (SDPA's math on fp32)."""
    import torch
    import torch.nn.functional as F

    q, k, v = (case[n].float() for n in ("q4", "k", "v"))
    out = []
    for b in range(q.shape[0]):  # one sequence at a time keeps the fp32 copy small
        out.append(F.scaled_dot_product_attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], enable_gqa=True))
    return torch.cat(out)[:, :, 0]


def bench(shapes=SHAPES, heads=HEADS, no_flex=False, flex_budget_s=150.0, log=print) -> list[dict]:
    """One row per (heads, shape). FlexAttention compiles once per shape (tens of seconds each):
    it runs at Hq = 32 only (the FACTS table's shapes) and stops once flex_budget_s is spent."""
    import torch

    from drill.kernels import decode
    from drill.kernels.benchmarks.common import graph_ms, host_us

    impls = _implementations(no_flex)
    flex_spent = 0.0
    rows = []
    for Hq, Hkv in heads:
        for B, S in shapes:
            case = _case(B, S, Hq, Hkv)
            kv_bytes = 2 * B * Hkv * S * D * 2
            ref = _reference(case)
            row = {"B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "kv_mb": kv_bytes / 1e6}
            for name, fn in impls.items():
                if name == "flex" and (Hq != 32 or flex_spent > flex_budget_s):
                    continue
                t0 = time.time()
                try:
                    out = fn(case)
                    err = (out.float() - ref).abs().max().item()
                    ms = _median_ms(lambda fn=fn, case=case: fn(case))
                except Exception as exc:  # noqa: BLE001 - a backend without a kernel for this shape
                    row[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
                    continue
                finally:
                    if name == "flex":
                        flex_spent += time.time() - t0
                if name == "ours":
                    row["config"] = dict(decode.LAST)
                row[name] = kv_bytes / (ms * 1e-3) / 1e12
                row[f"{name}_err"] = err
                row[f"{name}_us"] = ms * 1e3
                try:
                    row[f"{name}_host_us"] = host_us(lambda fn=fn, case=case: fn(case))
                    row[f"{name}_graph"] = kv_bytes / (graph_ms(lambda fn=fn, case=case: fn(case)) * 1e-3) / 1e12
                except Exception as exc:  # noqa: BLE001 - a backend that cannot be captured in a graph
                    row[f"{name}_graph_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
            # The roofline at this size: a device copy moving as many bytes (read K, write K), replayed
            # from a graph like the rows above; launch and tail effects cap any kernel at small sizes.
            # The better of a memcpy (replayed from a graph, ≥ 0.5 GB copies ran at 2.7 TB/s: kernels/NOTES.md)
            # and an elementwise kernel.
            dst = torch.empty_like(case["k"])
            copies = (lambda d=dst, k=case["k"]: d.copy_(k), lambda d=dst, k=case["k"]: torch.mul(k, 1, out=d))
            row["copy_graph"] = max(kv_bytes / (graph_ms(c) * 1e-3) / 1e12 for c in copies)
            del dst, copies
            for suffix in ("", "_graph"):
                if row.get("ours" + suffix) and row.get("cudnn" + suffix):
                    row["ours/cudnn" + suffix] = row["ours" + suffix] / row["cudnn" + suffix]
                if row.get("ours" + suffix):
                    row["ours/peak" + suffix] = row["ours" + suffix] / DATASHEET_TBS
            rows.append(row)
            log(format_row(row))
            del case, ref
            torch.cuda.empty_cache()
    return rows


def format_row(r: dict) -> str:
    cells = [f"B={r['B']} S={r['S'] // 1024}k H={r['Hq']}/{r['Hkv']} {r['kv_mb']:.0f} MB"]
    for n in IMPLS:
        if n in r:
            cells.append(f"{n} {r[n]:.2f} TB/s ({r[n + '_us']:.1f} us, err {r[n + '_err']:.1e})")
        elif f"{n}_error" in r:
            cells.append(f"{n} failed: {r[n + '_error']}")
    if "ours/cudnn" in r:
        cells.append(f"ours/cuDNN {r['ours/cudnn']:.2f}")
    return " | ".join(cells)


def to_markdown(rows: list[dict], copy: float | None, suffix: str = "") -> str:
    """The TB/s table: suffix "" for eager calls timed with do_bench, "_graph" for CUDA-graph replays."""
    names = [n for n in IMPLS if any(n + suffix in r for r in rows)]
    head = ["batch, context", "Hq/Hkv", "K+V MB"] + [LABELS[n] for n in names] + [
        "ours / cuDNN", "ours / 4.8 TB/s"]
    if not suffix:
        head += ["host µs per call: ours, cuDNN", "splits, (BLOCK_N, warps, stages), merge"]
    else:
        head += ["copy of as many bytes (best of memcpy, elementwise), TB/s", "ours / copy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cfg = r.get("config") or {}
        cells = [f"{r['B']}, {r['S'] // 1024}k", f"{r['Hq']}/{r['Hkv']}", f"{r['kv_mb']:.0f}"]
        cells += [f"{r[n + suffix]:.2f}" if n + suffix in r else "n/a" for n in names]
        cells += [f"{r['ours/cudnn' + suffix]:.2f}" if "ours/cudnn" + suffix in r else "n/a",
                  f"{100 * r['ours/peak' + suffix]:.0f} %" if "ours/peak" + suffix in r else "n/a"]
        if not suffix:
            cells += [" / ".join(f"{r[n + '_host_us']:.0f}" if n + "_host_us" in r else "n/a" for n in ("ours", "cudnn")),
                      f"{cfg.get('num_splits')}, {cfg.get('config')}, {'fused' if cfg.get('fused') else 'kernel'}"
                      if cfg else ""]
        elif "copy_graph" in r:
            cells += [f"{r['copy_graph']:.2f}", f"{r['ours_graph'] / r['copy_graph']:.2f}" if "ours_graph" in r else "n/a"]
        lines.append("| " + " | ".join(cells) + " |")
    note = f"\nDevice copy: {copy:.2f} TB/s (read + write)." if copy and not suffix else ""
    return "\n".join(lines) + note


def run(quick: bool = False, no_flex: bool = False, log=print) -> dict:
    import torch
    import triton

    if not torch.cuda.is_available():
        return {"status": "skip", "summary": "no CUDA GPU", "markdown": "", "data": {}}
    _spin_up()
    copy = copy_tbs()
    log(f"device copy {copy:.2f} TB/s")
    shapes = SHAPES[:2] + SHAPES[-1:] if quick else SHAPES
    rows = bench(shapes=shapes, no_flex=no_flex, log=log)
    head = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}; "
            f"bf16, D = {D}, one query row per sequence; TB/s of K+V read, do_bench medians (L2 flushed "
            f"between calls); errors against fp32 attention on the upcast inputs.")
    try:
        launches = launch_us()
    except Exception as exc:  # noqa: BLE001 - a figure beside the table, never a reason to lose it
        launches = {"error": float("nan")}
        log(f"launch_us failed: {type(exc).__name__}: {exc}")
    log("Triton launch, host µs: " + ", ".join(f"{k} {v:.1f}" for k, v in launches.items()))
    head += (" Host µs per launch of an empty Triton kernel: "
             + ", ".join(f"{k}: {v:.1f}" for k, v in launches.items()) + ".")
    md = (head + "\n\nEager calls (do_bench; the host's launch overhead counts where it exceeds the GPU's "
          "time):\n\n" + to_markdown(rows, copy) + "\n\nCUDA-graph replays (one capture per "
          "implementation, L2 flushed before each replay; the GPU's time alone):\n\n"
          + to_markdown(rows, copy, "_graph"))
    summary = f"{len(rows)} shapes"
    for suffix, label in (("", "eager"), ("_graph", "graph")):
        ratios = [r["ours/cudnn" + suffix] for r in rows if "ours/cudnn" + suffix in r]
        big = [r["ours/peak" + suffix] for r in rows if r["kv_mb"] >= 256 and "ours/peak" + suffix in r]
        misses = [f"B={r['B']} S={r['S']} H={r['Hq']}" for r in rows if r.get("ours/cudnn" + suffix, 1) < 1.0]
        summary += (f"; {label}: ours/cuDNN min {min(ratios):.2f}" if ratios else "") + (
            f", big shapes {100 * min(big):.0f}-{100 * max(big):.0f} % of 4.8 TB/s" if big else "") + (
            f", below cuDNN at {', '.join(misses)}" if misses else "")
    errs = [r[k] for r in rows for k in r if k.endswith("_err") and k.startswith(("ours", "paged"))]
    status = "pass" if errs and max(errs) < 2e-2 else "fail"
    return {"status": status, "summary": summary, "markdown": md, "data": {"rows": rows, "copy_tbs": copy, "launch_us": launches}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-flex", action="store_true")
    args = ap.parse_args(argv)
    res = run(quick=args.quick, no_flex=args.no_flex)
    out = Path(os.environ.get("OUT") or "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode.md").write_text(res["markdown"] + "\n")
    print(res["markdown"])
    print(res["summary"])
    return 0 if res["status"] != "fail" else 1


if __name__ == "__main__":
    raise SystemExit(main())
