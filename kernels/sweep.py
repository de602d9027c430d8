"""Launch configs of the reference kernel (kernels/flash.py), compiled and timed outside the tuner.

`precompile_candidates` compiles every config the tuner may try, in parallel processes, so
that a benchmark's first call only times (Triton keeps the binaries on disk).
`sweep_configs` times every config of SWEEP_SPACE per kernel kind, head dim, length and
mask: how the candidate lists in kernels/flash.py were chosen (kernels/NOTES.md, v1).
Both need a CUDA GPU; gpu_suite's `sweep` step runs the sweep.
"""

from __future__ import annotations

import json
import math
import time
from typing import Callable

from drill.kernels.bench import HEADS, _median_ms

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

    from drill.kernels import flash as fl

    b, h, q, k, v, do = _sweep_case_inputs(d, s, tokens, dtype)
    scale = 1.0 / math.sqrt(d)
    fl.FORCED_CONFIGS.clear()
    fl.FORCED_CONFIGS.update({kk: fl._candidates(kk, d)[0] for kk in ("fwd", "bwd_kv", "bwd_q")})
    fl.FORCED_CONFIGS[kind] = cfg
    try:
        if kind == "fwd":
            fn = lambda: fl._forward(q, k, v, causal, scale)  # noqa: E731
        else:
            o, lse = fl._forward(q, k, v, causal, scale)
            fn = lambda: fl._backward(q, k, v, o, lse, do, None, causal, scale)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        return _median_ms(fn, 10, 40) if time_it else 0.0
    finally:
        fl.FORCED_CONFIGS.clear()


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

    from drill.kernels import flash as fl

    jobs = [(kind, cfg, d, 4096, causal, 16384, dtype)
            for kind in ("fwd", "bwd_kv", "bwd_q") for d in ds for causal in causals for cfg in fl._candidates(kind, d)]
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
