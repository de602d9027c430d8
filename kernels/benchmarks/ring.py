"""Ring attention on every visible GPU: correctness against one GPU, then timing.

    python -m drill.kernels.benchmarks.ring [--quick] [--seqs 32768,65536]   # writes $OUT/ring.md
    (the GPU suite runs it as the step `ring_bench`)

One process per GPU (torch.multiprocessing spawn, NCCL, NCCL_NVLS_ENABLE=0). Every rank
builds the same inputs from one seed on its own GPU, so each can compare its shard with
the single-GPU FlashAttention of the whole sequence without gathering anything.

1. Correctness (S = 8192, bf16, B=1, H=8, D=128): for both layouts, causal and not, each
   rank's o and lse against an fp32 reference of its rows; passes when the ring's error is
   at most twice the single-GPU kernel's error (plus 1e-3): the same rule as the kernel tests.
2. Timing: for S in 32k..256k tokens, the single-GPU kernel on the whole sequence against
   the ring on W GPUs (contiguous; causal also zigzag). Time = slowest rank (CUDA events,
   median of the repeats). FLOPs = 4·B·H·S²·D, half for causal; TFLOP/s per GPU = FLOPs /
   time / W. The flash kernel's autotuner is off by default (DRILL_FLASH_TUNE=0, the same
   config everywhere; set DRILL_FLASH_TUNE=1 to tune each shape, which costs minutes).

`spawn_ranks(fn, world, backend)` is also what tests/test_ring_reference.py uses on CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

HEADS, HEAD_DIM, BATCH = 8, 128, 1
CHECK_SEQ = 8192
SEQS = (32768, 65536, 131072, 262144)
QUICK_SEQS = (32768, 131072)


# --------------------------------------------------------------------------- launching ranks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn, world: int, backend: str, port: int, out: str, args: tuple) -> None:
    """Runs in each spawned rank: join the group, run fn(rank, world, *args), save rank 0's result."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    kwargs = {}
    if backend == "nccl":
        torch.cuda.set_device(rank)
        kwargs["device_id"] = torch.device("cuda", rank)
    dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)
    try:
        result = fn(rank, world, *args)
        dist.barrier()
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f, default=str)
    finally:
        dist.destroy_process_group()


def spawn_ranks(fn, world: int, backend: str = "gloo", args: tuple = (), timeout_s: float = 480.0) -> list:
    """Run fn(rank, world, *args) in `world` fresh processes joined in one group; return each rank's result.

    fn must be importable by name (a module-level function) and return something JSON-serialisable.
    A rank that raises makes this raise; ranks still running after timeout_s are killed (a hung
    collective must not hang the whole GPU suite).
    """
    import torch.multiprocessing as mp

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off: inherited by the ranks
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory(prefix="drill-ring-") as out:
        ctx = mp.start_processes(_entry, args=(fn, world, backend, _free_port(), out, args), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                raise TimeoutError(f"{world} ranks still running after {timeout_s:g} s: killed")
        results = []
        for rank in range(world):
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                results.append(json.load(f))
    return results


# --------------------------------------------------------------------------- in each rank

# The GPU configuration; tests run the same rank code on CPUs with a tiny one.
GPU_CONFIG = {"device": "cuda", "dtype": "bfloat16", "heads": HEADS, "dim": HEAD_DIM, "check_seq": CHECK_SEQ}


def _device(config: dict, rank: int):
    import torch

    return torch.device("cuda", rank) if config["device"] == "cuda" else torch.device("cpu")


def _inputs(seq: int, config: dict, rank: int, seed: int = 0):
    import torch

    device = _device(config, rank)
    g = torch.Generator(device=device).manual_seed(seed)
    shape = (BATCH, config["heads"], seq, config["dim"])
    return [torch.randn(shape, generator=g, device=device, dtype=getattr(torch, config["dtype"])) for _ in range(3)]


def _max_across(value: float, config: dict, rank: int) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=_device(config, rank))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _elapsed_ms(fn, device) -> float:
    import torch

    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end)


def _row_shard(x, rank: int, world: int, layout: str):
    """shard() for [B, H, S] statistics (the sequence is the last dimension)."""
    from drill.kernels.ring import shard

    return shard(x.unsqueeze(-1), rank, world, layout).squeeze(-1)


def check_rank(rank: int, world: int, config: dict) -> list[dict]:
    """Ring vs single-device flash vs an fp32 reference, on this rank's rows; the worst over ranks."""
    import torch

    from drill.kernels import flash_attention, ring_attention
    from drill.kernels.ring import LAYOUTS, shard, torch_block

    q, k, v = _inputs(config["check_seq"], config, rank)
    rows = []
    for causal in (False, True):
        ref_o, ref_lse = torch_block(q, k, v, causal, 1.0 / config["dim"] ** 0.5)  # >= fp32, whole sequence
        one_o, one_lse = flash_attention(q, k, v, causal=causal, return_lse=True)
        for layout in LAYOUTS:
            mine = [shard(t, rank, world, layout) for t in (q, k, v)]
            o, lse = ring_attention(*mine, causal=causal, layout=layout, impl="flash")
            want_o, want_lse = shard(ref_o, rank, world, layout), _row_shard(ref_lse, rank, world, layout)
            err = {
                "o_ring": (o.float() - want_o).abs().max().item(),
                "o_flash": (shard(one_o, rank, world, layout).float() - want_o).abs().max().item(),
                "lse_ring": (lse.float() - want_lse).abs().max().item(),
                "lse_flash": (_row_shard(one_lse, rank, world, layout).float() - want_lse).abs().max().item(),
            }
            err = {key: _max_across(val, config, rank) for key, val in err.items()}
            ok = err["o_ring"] <= 2 * err["o_flash"] + 1e-3 and err["lse_ring"] <= 2 * err["lse_flash"] + 1e-3
            rows.append({"causal": causal, "layout": layout, "ok": ok, **err})
        del ref_o, ref_lse, one_o, one_lse
        if config["device"] == "cuda":
            torch.cuda.empty_cache()
    return rows


def _time(fn, reps: int, config: dict, rank: int) -> float:
    """Median milliseconds of fn() on this rank, after a warm-up; then the slowest rank's median."""
    import torch.distributed as dist

    device = _device(config, rank)
    fn()  # warm-up: compiles, NCCL connections
    times = []
    for _ in range(reps):
        dist.barrier()
        times.append(_elapsed_ms(fn, device))
    return _max_across(statistics.median(times), config, rank)


def time_rank(rank: int, world: int, seqs: list[int], reps: int, config: dict) -> list[dict]:
    import torch
    import torch.distributed as dist

    from drill.kernels import flash_attention, ring_attention
    from drill.kernels.ring import shard

    device = _device(config, rank)
    rows = []
    for seq in seqs:
        q, k, v = _inputs(seq, config, rank, seed=seq)
        for causal in (False, True):
            # One device: rank 0 runs the whole sequence while the others wait at the barrier.
            one = 0.0
            if rank == 0:
                flash_attention(q, k, v, causal=causal)
                one = statistics.median(_elapsed_ms(lambda q=q, k=k, v=v: flash_attention(q, k, v, causal=causal), device)
                                        for _ in range(reps))
            dist.barrier()
            one = _max_across(one, config, rank)
            for layout in ("contiguous", "zigzag") if causal else ("contiguous",):
                mine = [shard(t, rank, world, layout) for t in (q, k, v)]
                ms = _time(lambda mine=mine: ring_attention(*mine, causal=causal, layout=layout, impl="flash"),
                           reps, config, rank)
                rows.append({"seq": seq, "causal": causal, "layout": layout, "one_gpu_ms": one, "ring_ms": ms})
                del mine
        del q, k, v
        if config["device"] == "cuda":
            torch.cuda.empty_cache()
    return rows


def bench_rank(rank: int, world: int, seqs: list[int], reps: int, config: dict | None = None) -> dict:
    """Everything one rank does: the correctness rows, then the timing rows."""
    config = config or GPU_CONFIG
    os.environ.setdefault("DRILL_FLASH_TUNE", "0")
    return {"config": config, "check": check_rank(rank, world, config),
            "timing": time_rank(rank, world, seqs, reps, config)}


# --------------------------------------------------------------------------- report


def flops(seq: int, causal: bool, heads: int = HEADS, dim: int = HEAD_DIM) -> float:
    f = 4.0 * BATCH * heads * seq * seq * dim
    return f / 2 if causal else f


def to_markdown(result: dict, world: int, header: str) -> str:
    lines = [header, "", "Correctness (each rank's rows vs an fp32 reference; max |error| over ranks):", "",
             "| mask | layout | o ring | o 1-GPU flash | lse ring | lse 1-GPU flash | ok |", "|---|---|---|---|---|---|---|"]
    for r in result["check"]:
        lines.append(f"| {'causal' if r['causal'] else 'none'} | {r['layout']} | {r['o_ring']:.2e} | {r['o_flash']:.2e} "
                     f"| {r['lse_ring']:.2e} | {r['lse_flash']:.2e} | {'yes' if r['ok'] else 'NO'} |")
    cfg = result.get("config", GPU_CONFIG)
    lines += ["", f"Timing ({cfg['dtype']}, B={BATCH}, H={cfg['heads']}, D={cfg['dim']}; "
              f"ring time = slowest of {world} ranks, median of repeats):", "",
              f"| S | mask | layout | 1 GPU ms | {world} GPUs ms | speed-up | tokens/s ({world} GPUs) "
              f"| TFLOP/s (1 GPU) | TFLOP/s per GPU ({world} GPUs) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in result["timing"]:
        f = flops(r["seq"], r["causal"], cfg["heads"], cfg["dim"])
        one, ring = r["one_gpu_ms"], r["ring_ms"]
        size = f"{r['seq'] // 1024}k" if r["seq"] % 1024 == 0 else str(r["seq"])
        lines.append(f"| {size} | {'causal' if r['causal'] else 'none'} | {r['layout']} | {one:.2f} | "
                     f"{ring:.2f} | {one / ring:.2f}× | {BATCH * r['seq'] / ring * 1e3:,.0f} | "
                     f"{f / one / 1e9:.0f} | {f / ring / 1e9 / world:.0f} |")
    return "\n".join(lines)


def run(quick: bool = False, seqs: list[int] | None = None, reps: int = 5, log=print) -> dict:
    """The whole benchmark; returns {status, summary, markdown, data} (what a gpu_suite step reports)."""
    import torch
    import triton

    world = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if world < 2:
        return {"status": "skip", "summary": f"needs 2 or more GPUs, found {world}", "markdown": "", "data": {}}
    seqs = list(seqs or (QUICK_SEQS if quick else SEQS))
    log(f"ring_bench: {world} GPUs, S = {seqs}, NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE', '0')}")
    t0 = time.time()
    result = spawn_ranks(bench_rank, world, "nccl", args=(seqs, reps, GPU_CONFIG))[0]
    tune = os.environ.get("DRILL_FLASH_TUNE", "0")
    header = (f"{world}× {torch.cuda.get_device_name(0)}, NCCL, torch {torch.__version__}, Triton {triton.__version__}; "
              f"blocks by drill.kernels.flash_attention (autotune {'on' if tune != '0' else 'off'}); "
              f"{time.strftime('%Y-%m-%d', time.gmtime())}; {time.time() - t0:.0f} s.")
    md = to_markdown(result, world, header)
    log(md)
    bad = [r for r in result["check"] if not r["ok"]]
    zig = {(r["seq"], r["layout"]): r["ring_ms"] for r in result["timing"] if r["causal"]}
    gains = [zig[(s, "contiguous")] / zig[(s, "zigzag")] for s in seqs if (s, "zigzag") in zig]
    summary = (f"{len(result['check']) - len(bad)}/{len(result['check'])} correct; "
               + (f"causal zigzag vs contiguous {min(gains):.2f}-{max(gains):.2f}×" if gains else ""))
    return {"status": "fail" if bad else "pass", "summary": summary, "markdown": md, "data": result}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seqs", help="comma-separated total sequence lengths")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    seqs = [int(s) for s in args.seqs.split(",")] if args.seqs else None
    res = run(quick=args.quick, seqs=seqs, reps=args.reps)
    out = Path(os.environ.get("OUT") or "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    (out / "ring.md").write_text(res["markdown"] or res["summary"])
    print(res["summary"])
    return 0 if res["status"] != "fail" else 1


if __name__ == "__main__":
    sys.exit(main())
