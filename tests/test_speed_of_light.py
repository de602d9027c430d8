"""The speed-of-light arithmetic (kernels/benchmarks/speed_of_light.py) on made-up ceilings: the
floors, which one binds, and a timing under the floor refused (the GPU side runs in the suite)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from drill.kernels.benchmarks import speed_of_light as sol  # noqa: E402
from drill.kernels.benchmarks import training  # noqa: E402

# 1000 TFLOP/s of matmul, 4e12 exp2/s, 4 TB/s: H100-like round numbers
CEIL = sol.Ceilings(matmul_tflops=1000.0, exp_per_s=4e12, hbm_bytes_per_s=4e12, gpu="made up")


def test_floors_are_work_over_rate():
    f = sol.attention_floors(CEIL, B=2, H=8, S=4096, D=128, causal=False)
    pairs = 2 * 8 * 4096 * 4096
    assert f["matmul"] == pytest.approx(4 * pairs * 128 / 1e15 * 1e3)
    assert f["exp"] == pytest.approx(pairs / 4e12 * 1e3)
    assert f["HBM"] == pytest.approx(4 * 2 * 8 * 4096 * 128 * 2 / 4e12 * 1e3)
    half = sol.attention_floors(CEIL, B=2, H=8, S=4096, D=128, causal=True)
    assert half["matmul"] == pytest.approx(f["matmul"] / 2) and half["HBM"] == pytest.approx(f["HBM"])


@pytest.mark.parametrize("d,binds", [(128, "matmul"), (32, "exp")])
def test_the_larger_floor_binds(d, binds):
    # per score: 4·D FLOPs at 1e15/s against one exp at 4e12/s; they cross at D = 62.5
    a = sol.assess(CEIL, ms=10.0, B=1, H=16, S=4096, D=d, causal=False)
    assert a.binding == binds
    assert a.share == pytest.approx(a.floors[binds] / 10.0)
    assert not a.impossible


def test_a_timing_under_the_floor_is_impossible():
    floor = sol.attention_floors(CEIL, 1, 16, 4096, 128, False)["matmul"]
    assert sol.assess(CEIL, floor * 0.5, 1, 16, 4096, 128, False).impossible
    assert not sol.assess(CEIL, floor * 1.01, 1, 16, 4096, 128, False).impossible


def test_bench_row_drops_a_user_figure_faster_than_light():
    floor = sol.attention_floors(CEIL, 4, 16, 4096, 128, True)["matmul"]
    row = {"d": 128, "s": 4096, "b": 4, "h": 16, "causal": True, "dtype": "bfloat16", "errors": {},
           "ms": {"ours": floor * 1.6, "user": floor * 0.3}, "tflops": {"ours": 1.0, "user": 9.0}}
    training._light_figures(row, CEIL)
    assert row["light"]["binding"] == "matmul"
    assert row["light"]["share"] == {"ours": pytest.approx(1 / 1.6)}
    assert "user" not in row["ms"] and "faster than the matmul floor" in row["errors"]["user"]


def test_backward_floors_count_its_work():
    f = sol.attention_floors(CEIL, 1, 16, 4096, 128, False, backward=True)
    fwd = sol.attention_floors(CEIL, 1, 16, 4096, 128, False)
    assert f["matmul"] == pytest.approx(2.5 * fwd["matmul"]) and f["exp"] == pytest.approx(fwd["exp"])
    assert f["HBM"] == pytest.approx(2 * fwd["HBM"])  # q, k, v, o, do read; dq, dk, dv written


def test_check_row_places_each_kernel_and_refuses_a_forged_timing():
    floor = sol.attention_floors(CEIL, 1, 16, 4096, 128, False)["matmul"]
    figures = {"yours": floor * 2, "reference": floor * 1.25, "SDPA cuDNN": None}
    line, too_fast = sol.check_row(CEIL, figures, (1, 16, 4096, 128), False, yours_judged=True)
    assert "matmul binds; yours at 50% of its speed of light; reference at 80%" in line and too_fast is None
    line, _ = sol.check_row(CEIL, figures, (1, 16, 4096, 128), False, yours_judged=False)
    assert "yours in noise; reference at 80%" in line
    _, too_fast = sol.check_row(CEIL, dict(figures, yours=floor / 3), (1, 16, 4096, 128), False, yours_judged=True)
    assert too_fast and "against a matmul floor of" in too_fast


def test_decode_reads_the_cache_once_and_hbm_binds():
    f = sol.decode_floors(CEIL, B=4, Hq=32, Hkv=8, S=8192, D=128)
    assert f["HBM"] == pytest.approx(2 * 4 * 8 * 8192 * 128 * 2 / 4e12 * 1e3)
    assert f["matmul"] == pytest.approx(4 * 4 * 32 * 8192 * 128 / 1e15 * 1e3)
    a = sol.assess_decode(CEIL, f["HBM"] * 2, 4, 32, 8, 8192, 128)
    assert a.binding == "HBM" and a.share == pytest.approx(0.5) and not a.impossible
    assert sol.assess_decode(CEIL, f["HBM"] / 2, 4, 32, 8, 8192, 128).impossible
