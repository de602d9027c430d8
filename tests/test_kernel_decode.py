"""The reference split-KV decode kernel (drill.kernels.flash_decode).

CPU: small float32 shapes under TRITON_INTERPRET=1 against a float64 reference: contiguous
and paged caches, GQA and MQA, ragged seq_lens, NaN in every cache row past seq_len,
more splits than blocks.
GPU (marker `gpu`, run by kernels/benchmarks/suite.py): bf16 and fp16 against an fp32 reference
on upcast inputs, no more than about twice the error of naive attention in the same
precision, plus the H200 benchmark shapes at small batch.
"""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from drill.kernels import decode as decode_mod  # noqa: E402
from drill.kernels import flash_decode  # noqa: E402

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
DEVICE = "cuda" if ON_GPU else "cpu"


def reference(q, k_cache, v_cache, seq_lens, block_table=None, dtype=torch.float64, scale=None, return_lse=False):
    """o [B, Hq, D] (and lse [B, Hq], natural log) from the live rows only, in `dtype`; query head
    h reads KV head h // group; scores times `scale` (None: 1/sqrt(D))."""
    B, Hq, D = q.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.zeros(B, Hq, D, dtype=dtype, device=q.device)
    lse = torch.zeros(B, Hq, dtype=dtype, device=q.device)
    for b in range(B):
        n = int(seq_lens[b])
        if block_table is None:
            k, v = k_cache[b, :, :n], v_cache[b, :, :n]  # [Hkv, n, D]
        else:
            page = k_cache.shape[1]
            pages = block_table[b, : -(-n // page)].long()
            k = k_cache[pages].reshape(-1, *k_cache.shape[2:])[:n].transpose(0, 1)
            v = v_cache[pages].reshape(-1, *v_cache.shape[2:])[:n].transpose(0, 1)
        group = Hq // k.shape[0]
        k = k.to(dtype).repeat_interleave(group, 0)
        v = v.to(dtype).repeat_interleave(group, 0)
        s = torch.einsum("hd,hnd->hn", q[b].to(dtype), k) * scale
        out[b] = torch.einsum("hn,hnd->hd", torch.softmax(s, -1), v)
        lse[b] = torch.logsumexp(s, -1)
    return (out, lse) if return_lse else out


def contiguous_cache(B, Hq, Hkv, S, D, seq_lens, dtype=torch.float32, device=DEVICE, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(B, Hq, D, generator=g).to(device, dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(device, dtype)
    v = torch.randn(B, Hkv, S, D, generator=g).to(device, dtype)
    for b, n in enumerate(seq_lens):  # rows past seq_len may hold anything
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    return q, k, v, torch.tensor(seq_lens, dtype=torch.int32, device=device)


def paged_cache(B, Hq, Hkv, page, D, seq_lens, dtype=torch.float32, device=DEVICE, seed=0, spare=3):
    """A shuffled page pool, NaN in unused slots and unreferenced pages; the table padded with -1."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    counts = [-(-n // page) for n in seq_lens]
    num_pages = sum(counts) + spare
    perm = torch.randperm(num_pages, generator=g)
    k = torch.full((num_pages, page, Hkv, D), float("nan"))
    v = torch.full((num_pages, page, Hkv, D), float("nan"))
    table = torch.full((B, max(counts) + 1), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(seq_lens):
        pages = perm[used:used + counts[b]]
        used += counts[b]
        table[b, : counts[b]] = pages.int()
        for p, pg in enumerate(pages):
            live = min(page, n - p * page)
            k[pg, :live] = torch.randn(live, Hkv, D, generator=g)
            v[pg, :live] = torch.randn(live, Hkv, D, generator=g)
    q = torch.randn(B, Hq, D, generator=g)
    return (q.to(device, dtype), k.to(device, dtype), v.to(device, dtype),
            torch.tensor(seq_lens, dtype=torch.int32, device=device), table.to(device))


CPU_CASES = [  # B, Hq, Hkv, S, D, seq_lens, num_splits
    (1, 4, 4, 40, 16, [40], None),
    (2, 4, 2, 70, 16, [70, 3], 3),
    (3, 8, 2, 50, 32, [1, 17, 50], None),
    (2, 6, 1, 33, 16, [33, 20], 5),  # MQA, group of 6 (padded to 16 rows)
    (1, 4, 2, 20, 16, [20], 9),  # more splits than blocks: empty splits
]


@pytest.mark.skipif(ON_GPU, reason="the GPU tests cover this")
@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: f"B{c[0]}-H{c[1]}/{c[2]}-S{c[3]}-split{c[6]}")
def test_contiguous_interpreter(case):
    B, Hq, Hkv, S, D, lens, splits = case
    q, k, v, sl = contiguous_cache(B, Hq, Hkv, S, D, lens)
    o = flash_decode(q, k, v, sl, num_splits=splits)
    assert o.shape == (B, Hq, D) and o.dtype == q.dtype
    torch.testing.assert_close(o.double(), reference(q, k, v, sl), atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(ON_GPU, reason="the GPU tests cover this")
def test_bf16_interpreter():
    """bf16 on the CPU: Triton's interpreter has no bf16 arithmetic (it computes on the bit
    patterns, values near 1e9), so flash_decode runs it in fp32 and rounds the output."""
    q, k, v, sl = contiguous_cache(2, 4, 2, 70, 16, [70, 3], dtype=torch.bfloat16)
    o = flash_decode(q, k, v, sl)
    assert o.dtype == torch.bfloat16
    torch.testing.assert_close(o.double(), reference(q, k, v, sl), atol=1e-2, rtol=1e-2)


@pytest.mark.skipif(ON_GPU, reason="the GPU tests cover this")
@pytest.mark.parametrize("page", [16, 5])
def test_paged_interpreter(page):
    lens = [37, 1, 64, 16]
    q, k, v, sl, table = paged_cache(4, 8, 2, page, 16, lens)
    for splits in (None, 3):
        o = flash_decode(q, k, v, sl, block_table=table, num_splits=splits)
        torch.testing.assert_close(o.double(), reference(q, k, v, sl, table), atol=1e-5, rtol=1e-5)


def test_reads_outside_the_cache_raise_before_any_kernel_runs():
    """A page a sequence reads that lies outside the pool, a sequence longer than its row of the
    table holds, or a length past S_max would make the kernel read out of bounds: each is a
    ValueError naming the argument (entries past a sequence's last page stay free, -1 included)."""
    lens = [37, 1, 16]
    q, k, v, sl, table = paged_cache(3, 4, 2, 16, 16, lens, device="cpu")
    flash_decode(q, k, v, sl, block_table=table)  # -1 past each sequence's pages: fine
    for row, col, value in ((0, 2, k.shape[0]), (1, 0, -1), (2, 0, 10**6)):
        bad = table.clone()
        bad[row, col] = value
        with pytest.raises(ValueError, match=rf"block_table\[{row}, {col}\] = {value} is outside the page pool"):
            flash_decode(q, k, v, sl, block_table=bad)
    with pytest.raises(ValueError, match="needs up to 5 pages"):  # 70 keys in pages of 16; the row holds 4
        flash_decode(q, k, v, torch.tensor([70, 1, 16], dtype=torch.int32), block_table=table)
    qc, kc, vc, slc = contiguous_cache(2, 4, 2, 40, 16, [40, 3], device="cpu")
    for lens_ in ([41, 3], [0, 3]):
        with pytest.raises(ValueError, match=r"seq_lens must lie in \[1, S_max = 40\]"):
            flash_decode(qc, kc, vc, torch.tensor(lens_, dtype=torch.int32))


@pytest.mark.parametrize("bad", ["q-dims", "cache-shapes", "head-dim", "dtype", "groups", "seq-lens", "table",
                                 "num-splits", "strides"])
def test_argument_errors_name_the_argument(bad):
    """Every argument check is a ValueError (never an assert, which python -O removes) naming the argument."""
    q, k, v, sl = contiguous_cache(2, 4, 2, 40, 16, [40, 3], device="cpu")
    call = dict(q=q, k_cache=k, v_cache=v, seq_lens=sl)
    name = {"q-dims": "q", "cache-shapes": "v_cache", "head-dim": "head dim", "dtype": "dtype", "groups": "Hq",
            "seq-lens": "seq_lens", "table": "block_table", "num-splits": "num_splits", "strides": "last dimension"}
    if bad == "q-dims":
        call["q"] = q[0]
    elif bad == "cache-shapes":
        call["v_cache"] = v[:, :, :20]
    elif bad == "head-dim":
        call.update(q=q[..., :12], k_cache=k[..., :12], v_cache=v[..., :12])
    elif bad == "dtype":
        call["q"] = q.double()
    elif bad == "groups":
        call["q"] = torch.cat([q, q[:, :1]], dim=1)  # 5 query heads over 2 KV heads
    elif bad == "seq-lens":
        call["seq_lens"] = sl.float()
    elif bad == "table":
        pq, pk, pv, psl, table = paged_cache(2, 4, 2, 16, 16, [40, 3], device="cpu")
        call = dict(q=pq, k_cache=pk, v_cache=pv, seq_lens=psl, block_table=table[:1])  # one row for B = 2
    elif bad == "num-splits":
        call["num_splits"] = 0
    elif bad == "strides":
        call["q"] = q.transpose(0, 2).contiguous().transpose(0, 2)
    with pytest.raises(ValueError, match=name[bad]):
        flash_decode(**call)


@pytest.mark.skipif(ON_GPU, reason="the GPU tests cover this")
@pytest.mark.parametrize("fused", [True, False], ids=["fused-merge", "merge-kernel"])
def test_both_merge_paths_interpreter(fused, monkeypatch):
    monkeypatch.setattr(decode_mod, "FUSED_MERGE", fused)
    q, k, v, sl = contiguous_cache(3, 8, 2, 70, 16, [70, 1, 33])
    for splits in (1, 4, 9):
        o = flash_decode(q, k, v, sl, num_splits=splits)
        torch.testing.assert_close(o.double(), reference(q, k, v, sl), atol=1e-5, rtol=1e-5)
    o = flash_decode(q, k, v, sl, num_splits=4)  # the counters were reset by the last call
    torch.testing.assert_close(o.double(), reference(q, k, v, sl), atol=1e-5, rtol=1e-5)


# Extreme scales: near-uniform weights, and one key taking (almost) all of the softmax, whose lse
# is then its score (~1e3 in magnitude, so compared relatively).
SCALES = [None, 1e-4, 0.02, 3.0, 100.0]


@pytest.mark.skipif(ON_GPU, reason="the GPU tests cover this")
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_scale_and_lse_interpreter(scale, paged, monkeypatch):
    """scale= and return_lse=True on both caches, GQA, both merge paths and more splits than blocks."""
    lens = [37, 1, 64]
    if paged:
        q, k, v, sl, table = paged_cache(3, 8, 2, 16, 16, lens)
    else:
        (q, k, v, sl), table = contiguous_cache(3, 8, 2, 64, 16, lens), None
    want_o, want_lse = reference(q, k, v, sl, table, scale=scale, return_lse=True)
    for fused in (True, False):
        monkeypatch.setattr(decode_mod, "FUSED_MERGE", fused)
        for splits in (None, 1, 3, 9):
            o, lse = flash_decode(q, k, v, sl, block_table=table, num_splits=splits, scale=scale, return_lse=True)
            assert lse.shape == (3, 8) and lse.dtype == torch.float32
            torch.testing.assert_close(o.double(), want_o, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-6)
    o = flash_decode(q, k, v, sl, block_table=table, scale=scale)  # o alone without return_lse
    torch.testing.assert_close(o.double(), want_o, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(ON_GPU, reason="the GPU tests cover this")
def test_lse_bf16_interpreter():
    q, k, v, sl = contiguous_cache(2, 4, 2, 70, 16, [70, 3], dtype=torch.bfloat16)
    o, lse = flash_decode(q, k, v, sl, scale=0.5, return_lse=True)
    want_o, want_lse = reference(q, k, v, sl, scale=0.5, return_lse=True)
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    torch.testing.assert_close(o.double(), want_o, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("scale", [0, -1.0, float("inf"), float("nan"), True, "0.1"])
def test_bad_scale_names_the_argument(scale):
    q, k, v, sl = contiguous_cache(2, 4, 2, 40, 16, [40, 3], device="cpu")
    with pytest.raises(ValueError, match="scale"):
        flash_decode(q, k, v, sl, scale=scale)


def test_split_count_fills_the_gpu():
    pick = decode_mod.pick_num_splits
    assert pick(1, 8, 8192, 132) >= 32  # one sequence: split the keys across the SMs
    assert pick(64, 8, 8192, 132) == 1  # 512 programs already fill 132 SMs
    assert pick(1, 8, 100, 132) == 1  # too few keys to split usefully
    assert 1 <= pick(8, 8, 32768, 132) <= 8


def test_tuner_times_split_counts_that_fill_whole_waves():
    counts = decode_mod.split_counts(1, 8, 131072, 132, 64)
    assert {17, 33, 66} <= set(counts)  # 8 programs per split: 1, 2 and 4 per SM
    assert {16, 33, 66} <= set(counts)  # and just short of full waves
    assert {2, 3} <= set(decode_mod.split_counts(8, 8, 32768, 132, 64))  # 128 or 192 programs, 132 SMs
    assert decode_mod.pick_num_splits(1, 8, 131072, 132, 64) in counts
    assert decode_mod.split_counts(1, 8, 100, 132, 64) == [1, 2]  # never more splits than blocks of keys
    assert max(decode_mod.split_counts(1, 1, 10**6, 132, 16)) <= 256


# --------------------------------------------------------------------------- GPU


def _naive(q, k, v, sl, table, dtype):
    """Attention computed in the input precision: the yardstick for a fair tolerance."""
    return reference(q, k, v, sl, table, dtype=dtype).float()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_gpu_accuracy(dtype, paged):
    dt = getattr(torch, dtype)
    for B, Hq, Hkv, lens in [(1, 32, 8, [8192]), (3, 64, 8, [5000, 1, 777]), (4, 8, 1, [300, 4096, 2, 129])]:
        if paged:
            q, k, v, sl, table = paged_cache(B, Hq, Hkv, 16, 128, lens, dtype=dt)
        else:
            q, k, v, sl = contiguous_cache(B, Hq, Hkv, max(lens), 128, lens, dtype=dt)
            table = None
        o = flash_decode(q, k, v, sl, block_table=table).float()
        ref = reference(q, k, v, sl, table, dtype=torch.float32)
        naive_err = (_naive(q, k, v, sl, table, dt) - ref).abs().max().item()
        err = (o - ref).abs().max().item()
        assert not torch.isnan(o).any()
        assert err <= 2 * naive_err + 1e-3, (B, Hq, Hkv, lens, err, naive_err)


@pytest.mark.gpu
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_gpu_scale_and_lse(paged):
    """bf16 o within twice naive attention's error, lse within 1e-3 relative of the fp32 reference,
    at extreme scales, through the path the tuner picks."""
    for scale in SCALES:
        for B, Hq, Hkv, lens in [(1, 32, 8, [8192]), (3, 64, 8, [5000, 1, 777])]:
            if paged:
                q, k, v, sl, table = paged_cache(B, Hq, Hkv, 16, 128, lens, dtype=torch.bfloat16)
            else:
                (q, k, v, sl), table = contiguous_cache(B, Hq, Hkv, max(lens), 128, lens, dtype=torch.bfloat16), None
            o, lse = flash_decode(q, k, v, sl, block_table=table, scale=scale, return_lse=True)
            ref, ref_lse = reference(q, k, v, sl, table, dtype=torch.float32, scale=scale, return_lse=True)
            naive = reference(q, k, v, sl, table, dtype=torch.bfloat16, scale=scale).float()
            err, naive_err = ((o.float() - ref).abs().max().item(), (naive - ref).abs().max().item())
            assert err <= 2 * naive_err + 1e-3, (scale, B, lens, err, naive_err)
            torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
def test_gpu_fast_launch_matches_tritons_launcher(monkeypatch):
    """Repeated calls reuse the compiled kernels through kernels/fastlaunch.py: the outputs
    must be bitwise those of Triton's own launcher, for a misaligned q and new seq_lens too."""
    from drill.kernels import fastlaunch

    q, k, v, sl = contiguous_cache(2, 32, 8, 4096, 128, [4096, 1000], dtype=torch.bfloat16)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)[1:].view_as(q)  # 2 bytes off
    shifted.copy_(q)
    shorter = torch.tensor([2000, 999], dtype=torch.int32, device=sl.device)  # within the non-NaN rows
    calls = [(q, sl), (q, sl), (shifted, sl), (shifted, sl), (q, shorter)]
    before = dict(decode_mod._launch_split_kernel.launches)
    fast = [flash_decode(qq, k, v, s) for qq, s in calls]
    assert decode_mod._launch_split_kernel.launches["fast"] > before["fast"]
    monkeypatch.setattr(fastlaunch, "enabled", False)
    for (qq, s), got in zip(calls, fast):
        assert torch.equal(got, flash_decode(qq, k, v, s))


@pytest.mark.gpu
def test_gpu_captured_call_takes_the_pick_by_gpu_time():
    """The tuner keeps two picks per shape: by eager time per call (launches count) and by CUDA-graph
    time. A call captured into a graph takes the second and replays to the eager call's output."""
    q, k, v, sl = contiguous_cache(1, 32, 8, 8192, 128, [8192], dtype=torch.bfloat16)
    eager = flash_decode(q, k, v, sl)
    eager_pick = dict(decode_mod.LAST)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flash_decode(q, k, v, sl)  # warm-up on the capture's stream, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = flash_decode(q, k, v, sl)
    assert decode_mod.LAST["captured"] and not eager_pick["captured"]
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured.float(), eager.float(), atol=2e-2, rtol=0)


@pytest.mark.gpu
def test_gpu_kept_scratch_is_per_stream():
    """Small decodes reuse their partials' scratch per stream: back-to-back calls on two streams, with
    no synchronisation between them, each give their own sequence's answer."""
    cases = [contiguous_cache(1, 32, 8, 8192, 128, [n], dtype=torch.bfloat16) for n in (8192, 3000)]
    want = [flash_decode(q, k, v, sl).clone() for q, k, v, sl in cases]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    got = [[], []]
    torch.cuda.synchronize()
    for _ in range(20):
        for i, (stream, (q, k, v, sl)) in enumerate(zip(streams, cases)):
            with torch.cuda.stream(stream):
                got[i].append(flash_decode(q, k, v, sl))
    torch.cuda.synchronize()
    for i in range(2):
        assert all(torch.equal(o, want[i]) for o in got[i])
