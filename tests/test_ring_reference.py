"""The reference ring attention (drill.kernels.ring_attention) on CPU ranks with gloo.

W = 2 and 3 spawned processes, each checking its shard against full attention in float64:
[B, H, S/W, D] and [S/W, D], causal and not, contiguous and zigzag, scores near 1e3; and,
under the Triton interpreter, the path that runs drill.kernels.flash_attention per block.
The bookkeeping (sharding, what each step computes, the zigzag balance) is checked
without processes. The GPU run is kernels/benchmarks/ring.py (a step of the GPU suite).
"""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")

from drill.kernels import ring_attention  # noqa: E402
from drill.kernels.benchmarks import ring as ring_bench  # noqa: E402
from drill.kernels.benchmarks.ring import spawn_ranks  # noqa: E402
from drill.kernels.ring import LAYOUTS, _plan, shard, unshard  # noqa: E402


def full_attention(q, k, v, causal: bool, scale: float):
    """float64 softmax(q kᵀ·scale) v and its logsumexp over the whole sequence (top-left = bottom-right)."""
    q, k, v = (t.double() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ v, lse


# Each case: (shape of the full q/k/v with S = per_rank * W in place of None, causal, layout, impl, dtype, spread)
CPU_CASES = [
    ((2, 3, None, 8), causal, layout, "torch", "float64", spread)
    for causal in (False, True) for layout in LAYOUTS for spread in (1.0, 30.0)
] + [((None, 5), causal, layout, "torch", "float64", 1.0) for causal in (False, True) for layout in LAYOUTS]
FLASH_CASES = [((1, 2, None, 16), causal, layout, "flash", "float32", 1.0) for causal in (False, True) for layout in LAYOUTS]


def run_cases(rank: int, world: int, cases: list, per_rank: int) -> list[dict]:
    """In each rank: every case's largest errors on this rank's rows (spawned; must be module-level)."""
    out = []
    for index, (shape, causal, layout, impl, dtype, spread) in enumerate(cases):
        full_shape = tuple(per_rank * world if d is None else d for d in shape)
        g = torch.Generator().manual_seed(100 + index)
        q, k, v = (torch.randn(full_shape, generator=g, dtype=getattr(torch, dtype)) for _ in range(3))
        q, k = q * spread, k * spread
        scale = 1.0 / math.sqrt(full_shape[-1])
        want_o, want_lse = full_attention(q, k, v, causal, scale)
        mine = [shard(t, rank, world, layout) for t in (q, k, v)]
        before = [t.clone() for t in mine]
        o, lse = ring_attention(*mine, causal=causal, layout=layout, impl=impl)
        want_lse_mine = shard(want_lse.unsqueeze(-1), rank, world, layout).squeeze(-1)
        out.append({
            "case": f"{full_shape} causal={causal} {layout} {impl} {dtype} spread={spread}",
            "o_err": (o.double() - shard(want_o, rank, world, layout)).abs().max().item(),
            "lse_err": (lse.double() - want_lse_mine).abs().max().item(),
            "shapes_ok": tuple(o.shape) == tuple(mine[0].shape) and tuple(lse.shape) == tuple(mine[0].shape[:-1]),
            "inputs_kept": all(torch.equal(a, b) for a, b in zip(mine, before)),
        })
    return out


def _assert_close(results: list[list[dict]], o_tol: float, lse_tol: float) -> None:
    for rank, rows in enumerate(results):
        for r in rows:
            where = f"rank {rank}, {r['case']}"
            assert r["shapes_ok"], f"{where}: wrong output shapes"
            assert r["inputs_kept"], f"{where}: q, k or v was modified"
            assert r["o_err"] <= o_tol, f"{where}: o off by {r['o_err']:.3g}"
            assert r["lse_err"] <= lse_tol, f"{where}: lse off by {r['lse_err']:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_ring_matches_full_attention_on_gloo(world):
    results = spawn_ranks(run_cases, world, "gloo", args=(CPU_CASES, 4))
    _assert_close(results, o_tol=1e-10, lse_tol=1e-9)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), reason="needs the Triton interpreter")
def test_ring_blocks_through_flash_kernel_under_interpreter():
    """impl='flash': each block by drill.kernels.flash_attention (its lse merged in fp32)."""
    pytest.importorskip("triton")
    results = spawn_ranks(run_cases, 2, "gloo", args=(FLASH_CASES, 16))
    _assert_close(results, o_tol=2e-5, lse_tol=2e-5)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), reason="needs the Triton interpreter")
def test_gpu_benchmark_rank_code_runs_on_cpu_ranks():
    """kernels/benchmarks/ring.py's per-rank code (correctness rows, timing rows, the table) on a tiny CPU config."""
    pytest.importorskip("triton")
    config = {"device": "cpu", "dtype": "float32", "heads": 2, "dim": 16, "check_seq": 32}
    results = spawn_ranks(ring_bench.bench_rank, 2, "gloo", args=([32, 64], 1, config))
    assert results[0]["check"] == results[1]["check"]  # errors are reduced over ranks
    assert len(results[0]["check"]) == 4 and all(r["ok"] for r in results[0]["check"]), results[0]["check"]
    assert [(r["seq"], r["causal"], r["layout"]) for r in results[0]["timing"]] == [
        (s, c, lay) for s in (32, 64) for c, lay in ((False, "contiguous"), (True, "contiguous"), (True, "zigzag"))]
    table = ring_bench.to_markdown(results[0], 2, "header")
    assert table.count("\n| 64 |") == 3 and "NO" not in table


def hang(rank: int, world: int) -> None:
    import time

    time.sleep(120)


@pytest.mark.slow
def test_spawn_ranks_kills_hung_ranks():
    import time

    start = time.monotonic()
    with pytest.raises(TimeoutError):
        spawn_ranks(hang, 2, "gloo", timeout_s=4)
    assert time.monotonic() - start < 30


# --------------------------------------------------------------------------- bookkeeping, no processes


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shard_and_unshard_are_inverse(layout, world):
    x = torch.arange(2 * 8 * world * 3).reshape(2, 8 * world, 3)
    parts = [shard(x, r, world, layout, dim=1) for r in range(world)]
    assert all(p.shape == (2, 8, 3) for p in parts)
    assert torch.equal(unshard(parts, layout, dim=1), x)
    if layout == "zigzag" and world > 1:  # rank 0 holds the first and the last chunk
        assert torch.equal(parts[0][:, :4], x[:, :4]) and torch.equal(parts[0][:, 4:], x[:, -4:])


def _covered(world: int, n: int, causal: bool, layout: str):
    """Simulate every rank and step: how often each (query, key) pair is computed, and each rank's work."""
    s = world * n
    pos = torch.arange(s)
    owned = [shard(pos, r, world, layout, dim=0) for r in range(world)]
    count = torch.zeros(s, s, dtype=torch.long)
    work = []
    for rank in range(world):
        done = 0.0
        for step in range(world):
            src = (rank - step) % world
            plan = _plan(src, rank, n, causal, layout)
            if plan is None:
                continue
            rows, cols, block_causal = plan
            qs, ks = owned[rank][rows], owned[src][cols]
            allowed = ks[None, :] <= qs[:, None] if block_causal else torch.ones(len(qs), len(ks), dtype=torch.bool)
            count[qs[:, None], ks[None, :]] += allowed.long()
            done += len(qs) * len(ks) / (2 if block_causal else 1)
        work.append(done)
    return count, work


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_every_visible_pair_is_computed_exactly_once(world, causal, layout):
    n = 6
    count, _ = _covered(world, n, causal, layout)
    visible = torch.ones(world * n, world * n, dtype=torch.long)
    if causal:
        visible = visible.tril()
    assert torch.equal(count, visible)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_zigzag_balances_causal_work(world):
    _, contiguous = _covered(world, 8, True, "contiguous")
    _, zigzag = _covered(world, 8, True, "zigzag")
    assert len(set(zigzag)) == 1, zigzag  # every rank does the same work
    # contiguous: rank r does r full blocks and one triangle, so the last rank does 2 - 1/W times the mean
    assert max(contiguous) / (sum(contiguous) / world) == pytest.approx(2 - 1 / world)
    assert sum(zigzag) == sum(contiguous)
