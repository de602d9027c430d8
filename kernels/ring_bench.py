"""Ring attention on every visible GPU: correctness against one GPU, then timing.

    python kernels/ring_bench.py [--quick] [--seqs 32768,65536]   # writes $OUT/ring.md
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


def spawn_ranks(fn, world: int, backend: str = "gloo", args: tuple = ()) -> list:
    """Run fn(rank, world, *args) in `world` fresh processes joined in one group; return each rank's result.

    fn must be importable by name (a module-level function) and return something JSON-serialisable.
    """
    import torch.multiprocessing as mp

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off: inherited by the ranks
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory(prefix="drill-ring-") as out:
        mp.spawn(_entry, args=(fn, world, backend, _free_port(), out, args), nprocs=world, join=True)
        results = []
        for rank in range(world):
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                results.append(json.load(f))
    return results


# --------------------------------------------------------------------------- in each rank


def _inputs(seq: int, device, dtype, seed: int = 0):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    shape = (BATCH, HEADS, seq, HEAD_DIM)
    return [torch.randn(shape, generator=g, device=device, dtype=dtype) for _ in range(3)]


def _max_across(value: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def check_rank(rank: int, world: int) -> list[dict]:
    """Ring vs single-GPU flash vs an fp32 reference, on this rank's rows; the worst over ranks."""
    import torch

    from drill.kernels.flash import flash_attention
    from drill.kernels.ring import LAYOUTS, _torch_block, ring_attention, shard

    q, k, v = _inputs(CHECK_SEQ, torch.device("cuda", rank), torch.bfloat16)
    rows = []
    for causal in (False, True):
        ref_o, ref_lse = _torch_block(q, k, v, causal, 1.0 / HEAD_DIM ** 0.5)  # fp32, full sequence
        one_o, one_lse = flash_attention(q, k, v, causal=causal, return_lse=True)
        for layout in LAYOUTS:
            mine = [shard(t, rank, world, layout) for t in (q, k, v)]
            o, lse = ring_attention(*mine, causal=causal, layout=layout)
            want_o, want_lse = shard(ref_o, rank, world, layout), shard(ref_lse[..., None], rank, world, layout)[..., 0]
            base_o, base_lse = shard(one_o, rank, world, layout), shard(one_lse[..., None], rank, world, layout)[..., 0]
            err = {
                "o_ring": (o.float() - want_o).abs().max().item(),
                "o_flash": (base_o.float() - want_o).abs().max().item(),
                "lse_ring": (lse.float() - want_lse).abs().max().item(),
                "lse_flash": (base_lse.float() - want_lse).abs().max().item(),
            }
            err = {key: _max_across(val) for key, val in err.items()}
            ok = (err["o_ring"] <= 2 * err["o_flash"] + 1e-3 and err["lse_ring"] <= 2 * err["lse_flash"] + 1e-3)
            rows.append({"causal": causal, "layout": layout, "ok": ok, **err})
        del ref_o, ref_lse
        torch.cuda.empty_cache()
    return rows


def _time(fn, reps: int) -> float:
    """Median milliseconds of fn() on this rank, then the slowest rank's median."""
    import torch
    import torch.distributed as dist

    fn()  # warm-up: compiles, NCCL connections
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return _max_across(statistics.median(times))


def time_rank(rank: int, world: int, seqs: list[int], reps: int) -> list[dict]:
    import torch
    import torch.distributed as dist

    from drill.kernels.flash import flash_attention
    from drill.kernels.ring import ring_attention, shard

    rows = []
    for seq in seqs:
        q, k, v = _inputs(seq, torch.device("cuda", rank), torch.bfloat16, seed=seq)
        for causal in (False, True):
            # One GPU: rank 0 runs the whole sequence while the others wait at the barrier.
            if rank == 0:
                one = _time_alone(lambda: flash_attention(q, k, v, causal=causal), reps)
            else:
                one = 0.0
            dist.barrier()
            one = _max_across(one)
            for layout in ("contiguous", "zigzag") if causal else ("contiguous",):
                mine = [shard(t, rank, world, layout) for t in (q, k, v)]
                ms = _time(lambda: ring_attention(*mine, causal=causal, layout=layout), reps)
                rows.append({"seq": seq, "causal": causal, "layout": layout, "one_gpu_ms": one, "ring_ms": ms})
                del mine
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def _time_alone(fn, reps: int) -> float:
    import torch

    fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _bench_rank(rank: int, world: int, seqs: list[int], reps: int) -> dict:
    os.environ.setdefault("DRILL_FLASH_TUNE", "0")
    return {"check": check_rank(rank, world), "timing": time_rank(rank, world, seqs, reps)}


# --------------------------------------------------------------------------- report


def flops(seq: int, causal: bool) -> float:
    f = 4.0 * BATCH * HEADS * seq * seq * HEAD_DIM
    return f / 2 if causal else f


def to_markdown(result: dict, world: int, header: str) -> str:
    lines = [header, "", "Correctness (each rank's rows vs an fp32 reference; max |error| over ranks):", "",
             "| mask | layout | o ring | o 1-GPU flash | lse ring | lse 1-GPU flash | ok |", "|---|---|---|---|---|---|---|"]
    for r in result["check"]:
        lines.append(f"| {'causal' if r['causal'] else 'none'} | {r['layout']} | {r['o_ring']:.2e} | {r['o_flash']:.2e} "
                     f"| {r['lse_ring']:.2e} | {r['lse_flash']:.2e} | {'yes' if r['ok'] else 'NO'} |")
    lines += ["", f"Timing (bf16, B={BATCH}, H={HEADS}, D={HEAD_DIM}; ring time = slowest of {world} ranks):", "",
              f"| S | mask | layout | 1 GPU ms | {world} GPUs ms | speed-up | tokens/s ({world} GPUs) "
              f"| TFLOP/s per GPU (1 GPU) | TFLOP/s per GPU ({world} GPUs) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in result["timing"]:
        f = flops(r["seq"], r["causal"])
        one, ring = r["one_gpu_ms"], r["ring_ms"]
        lines.append(f"| {r['seq'] // 1024}k | {'causal' if r['causal'] else 'none'} | {r['layout']} | {one:.2f} | "
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
    result = spawn_ranks(_bench_rank, world, "nccl", args=(seqs, reps))[0]
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
