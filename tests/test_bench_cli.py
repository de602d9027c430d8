"""`drill bench` without a GPU: one clear line, exit code 2, and no torch at CLI start-up;
`drill bench --kernel FILE`: the file runs only in the grader's sandboxed subject."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import exitcodes
from drill.cli import cli


def test_bench_without_gpu_says_so_and_exits_2(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(cli, ["bench", "--quick"])
    assert result.exit_code == exitcodes.CANNOT, result.output
    text = result.output  # click >= 8.2 mixes stderr into output
    assert "GPU" in text
    assert len(text.strip().splitlines()) == 1


def test_bench_json_without_gpu_is_a_json_document(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(cli, ["bench", "--json"])
    assert result.exit_code == exitcodes.CANNOT
    doc = json.loads(result.stdout)
    assert doc["status"] == "error" and "GPU" in doc["reason"] and doc["rows"] == []


def test_bench_help_lists_options():
    result = CliRunner().invoke(cli, ["bench", "--help"])
    assert result.exit_code == 0
    for opt in ("--kernel", "--json", "--quick"):
        assert opt in result.output


def test_cli_start_up_imports_no_torch():
    code = "import sys, drill.cli; drill.cli.cli.list_commands(None); print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


# --------------------------------------------------------------------------- --kernel FILE
#
# The user's file runs only in the grader's sandboxed subject (drill/grader/bench_user.py). On a
# CPU the command stops at "no GPU" before anything starts; the timing path is driven here
# with the GPU check passed and tiny sizes on the CPU (the rest of the table faked), and on
# the GPU by the `gpu` tests below.

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "flashattention" / "07_triton_forward.py"

# Says where it was imported: printed (a CLI importing it would print it on its own stdout)
# and written to MARKER (the sandbox stops the subject writing there; a CLI would not be stopped).
MARKED = '''
import os

print("IMPORTED-IN", os.getpid())
try:
    with open({marker!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
except OSError:
    pass
'''
SDPA_KERNEL = '''
import torch.nn.functional as F


def flash_attention(q, k, v, causal, sm_scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
'''


def marked_kernel(tmp_path: Path, body: str) -> tuple[Path, Path]:
    marker = tmp_path / "imported-by.txt"
    path = tmp_path / "my_kernel.py"
    path.write_text(MARKED.format(marker=str(marker)) + body, encoding="utf-8")
    return path, marker


def assert_not_imported_here(marker: Path, output: str) -> None:
    assert "IMPORTED-IN" not in output, output
    pids = marker.read_text().split() if marker.exists() else []
    assert str(os.getpid()) not in pids, pids
    assert not [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(marker.parent / "my_kernel.py")]


def test_bench_kernel_without_gpu_is_one_line_and_starts_nothing(tmp_path):
    """No NVIDIA driver: one line, exit 2, no torch or Triton imported, the file never run."""
    path, marker = marked_kernel(tmp_path, SDPA_KERNEL)
    code = ("import shutil, sys; shutil.which = lambda *a, **k: None\n"  # no nvidia-smi, even on a GPU machine
            "from click.testing import CliRunner\nfrom drill.cli import cli\n"
            f"r = CliRunner().invoke(cli, ['bench', '--kernel', {str(path)!r}])\n"
            "print(repr(r.output)); print(r.exit_code, 'torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    shown, status = out.strip().splitlines()
    assert status == f"{exitcodes.CANNOT} False False", out
    text = eval(shown)  # noqa: S307 - the repr printed above
    assert len(text.strip().splitlines()) == 1 and "CUDA GPU" in text, text
    assert not marker.exists()


def test_bench_kernel_json_without_gpu_is_an_error_document(tmp_path, monkeypatch):
    from drill.grader import runner

    monkeypatch.setattr(runner, "nvidia_driver_present", lambda: False)
    path, marker = marked_kernel(tmp_path, SDPA_KERNEL)
    result = CliRunner().invoke(cli, ["bench", "--kernel", str(path), "--json"])
    assert result.exit_code == exitcodes.CANNOT
    doc = json.loads(result.stdout)
    assert doc["status"] == "error" and "CUDA GPU" in doc["reason"]
    assert not marker.exists()


@pytest.mark.parametrize("args", [["--kernel", "no-such-file.py"], ["--kernel", "."]], ids=["missing", "a folder"])
def test_bench_kernel_that_is_not_a_file_is_refused(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["bench", *args])
    assert result.exit_code == exitcodes.CANNOT
    assert "--kernel" in result.output


def _user_row(result: dict | None, pass_: str = "fwd") -> dict:
    from drill.kernels.benchmarks import training as bench

    row = {"d": 64, "s": 1024, "b": 16, "h": 32, "causal": False, "pass": pass_, "dtype": "bfloat16", "ms": {},
           "tflops": {}, "max_err_vs_sdpa": {}, "errors": {}}
    bench._user_figures(row, result, 2e12)
    return row


TIMED = {"ms": 4.0, "round_trip_ms": 104.0, "transfer_ms": 100.0, "within_noise": False, "max_err": 0.01, "calls": 9}


def test_user_figures_in_a_row():
    pytest.importorskip("torch")
    from drill.kernels.benchmarks import training as bench

    row = _user_row(TIMED)
    assert row["ms"]["user"] == 4.0 and row["tflops"]["user"] == pytest.approx(500.0)
    assert row["user_round_trip"] == {"round_trip_ms": 104.0, "transfer_ms": 100.0, "within_noise": False, "calls": 9}
    noisy = _user_row({**TIMED, "within_noise": True, "round_trip_ms": 101.0})
    assert "user" not in noisy["tflops"] and "user" not in noisy["ms"] and noisy["max_err_vs_sdpa"]["user"] == 0.01
    assert bench.user_in_noise(noisy) and not bench.user_in_noise(row)
    failed = _user_row({"error": "wrong output: o is wrong"})
    assert failed["errors"]["user"].startswith("wrong output") and "user_round_trip" not in failed
    assert _user_row(TIMED, "bwd") == _user_row(None, "bwd")  # forward only
    table = bench.to_markdown([row, noisy, failed])
    assert "yours (round trip − transfer)" in table.splitlines()[0]
    assert [line.split(" | ")[5].strip(" |") for line in table.splitlines()[2:]] == ["500", "in noise", "—"]


@pytest.fixture
def cpu_bench(monkeypatch):
    """`drill bench --quick` past the GPU check, with the user's kernel timed for real on the CPU at
    one tiny size (through the real trusted process and sandboxed subject) and the rest of the
    table left out: the table only shows what bench_user measured."""
    pytest.importorskip("torch")
    import functools

    import torch

    from drill.commands import bench as command
    from drill.grader import bench_user
    from drill.kernels.benchmarks import training as bench

    cases = [{"d": 16, "s": 32, "b": 1, "h": 2, "causal": False}]

    def table(impls, user, log, **kw):
        rows = []
        for case in cases:
            for pass_ in ("fwd", "bwd"):
                row = {**case, "pass": pass_, "dtype": "bfloat16", "ms": {}, "tflops": {}, "max_err_vs_sdpa": {},
                       "errors": {}}
                bench._user_figures(row, user.get(bench_user.case_key(case)) if user else None,
                                    bench.flops(case["b"], case["h"], case["s"], case["d"], case["causal"], pass_))
                rows.append(row)
        return rows

    monkeypatch.setattr(command, "_gpu_or_reason", lambda: "")
    monkeypatch.setattr(bench, "bench_cases", lambda **kw: cases)
    monkeypatch.setattr(bench, "bench_table", table)
    monkeypatch.setattr(bench_user, "time_user_kernel",
                        functools.partial(bench_user.time_user_kernel, device="cpu", calls=3))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "CPU (test)")
    return cases


@pytest.mark.slow
def test_bench_kernel_runs_the_file_only_in_the_sandbox(cpu_bench, tmp_path):
    path, marker = marked_kernel(tmp_path, SDPA_KERNEL)
    result = CliRunner().invoke(cli, ["bench", "--quick", "--kernel", str(path)], terminal_width=200)
    assert result.exit_code == exitcodes.OK, result.output
    assert_not_imported_here(marker, result.output)
    text = " ".join(result.output.split())
    assert "yours (round trip − transfer)" in text, text
    assert "round trip minus calibrated transfer" in text and "forward only" in text, text
    assert "of which transfer" in text, text  # the progress line for the size timed


@pytest.mark.slow
def test_bench_kernel_json_carries_the_round_trip(cpu_bench, tmp_path):
    path, marker = marked_kernel(tmp_path, SDPA_KERNEL)
    result = CliRunner().invoke(cli, ["bench", "--quick", "--json", "--kernel", str(path)])
    assert result.exit_code == exitcodes.OK, result.output
    assert_not_imported_here(marker, result.stdout)
    doc = json.loads(result.stdout)
    assert "round trip minus calibrated transfer" in doc["user_method"]
    fwd, bwd = doc["rows"]
    trip = fwd["user_round_trip"]
    assert trip["round_trip_ms"] > 0 and trip["transfer_ms"] > 0 and trip["calls"] == 3
    assert fwd["max_err_vs_sdpa"]["user"] == 0.0  # the same SDPA call on the same inputs
    assert ("user" in fwd["tflops"]) != trip["within_noise"], fwd
    assert "user" not in bwd["ms"] and "user" not in bwd["errors"]  # forward only


@pytest.mark.slow
@pytest.mark.parametrize("body, expected", [
    ("def flash_attention(q, k, v, causal, sm_scale)\n    return q\n", "syntax error in your file, line"),
    ("def attention(q, k, v, causal, sm_scale):\n    return q\n", "missing function: flash_attention"),
    ("raise RuntimeError('no GPU for me')\n", "your file raised RuntimeError"),
], ids=["syntax error", "no flash_attention", "raises at import"])
def test_bench_kernel_that_does_not_load_is_one_line(cpu_bench, tmp_path, body, expected):
    path, marker = marked_kernel(tmp_path, body)
    result = CliRunner().invoke(cli, ["bench", "--quick", "--kernel", str(path)])
    assert result.exit_code == exitcodes.CANNOT, result.output
    lines = [line for line in result.output.splitlines() if line.strip() and "yours:" not in line]
    assert len(lines) == 1 and "cannot time" in lines[0] and expected in lines[0], result.output
    assert_not_imported_here(marker, result.output)


@pytest.mark.slow
@pytest.mark.parametrize("body, expected", [
    ("import torch\n\ndef flash_attention(q, k, v, causal, sm_scale):\n    return torch.zeros_like(q)\n",
     "wrong output: o is wrong"),
    ("def flash_attention(q, k, v, causal, sm_scale):\n    raise ValueError('D=16 is not supported')\n",
     "your kernel raised ValueError: D=16 is not supported"),
    ("def flash_attention(q, k, v, causal, sm_scale):\n    return q.float()\n", "wrong output: o has the wrong dtype"),
], ids=["wrong values", "raises", "wrong dtype"])
def test_bench_kernel_that_fails_a_size_is_reported_in_the_table(cpu_bench, tmp_path, body, expected):
    path, marker = marked_kernel(tmp_path, body)
    result = CliRunner().invoke(cli, ["bench", "--quick", "--kernel", str(path)], terminal_width=300)
    assert result.exit_code == exitcodes.OK, result.output
    text = " ".join(result.output.split())
    assert "could not run some cases" in text and expected in text, text
    assert_not_imported_here(marker, result.output)


# --------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
def test_gpu_bench_kernel_times_the_solution_in_the_sandbox(tmp_path):
    """The real command on the exercise's solution: fwd figures for yours, none for the backward,
    and the file never imported by drill's own process (it would print on the command's stdout)."""
    path, marker = marked_kernel(tmp_path, SOLUTION.read_text(encoding="utf-8"))
    env = {**os.environ, "DRILL_FLASH_TUNE": "0"}  # the reference kernel untuned: minutes less
    proc = subprocess.run([sys.executable, "-m", "drill", "bench", "--quick", "--json", "--kernel", str(path)],
                          capture_output=True, text=True, env=env, timeout=1200)
    assert proc.returncode == exitcodes.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "IMPORTED-IN" not in proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert "round trip minus calibrated transfer" in doc["user_method"]
    fwd = [r for r in doc["rows"] if r["pass"] == "fwd"]
    assert fwd and all("user_round_trip" in r for r in fwd), [r["errors"] for r in fwd]
    assert all(r["max_err_vs_sdpa"]["user"] < 0.05 for r in fwd), [r["max_err_vs_sdpa"] for r in fwd]
    for r in fwd:  # on an H200 the kernel's ~0.3 ms is inside ~100 ms of transfer: "in noise", no figure
        trip = r["user_round_trip"]
        assert trip["calls"] == 9 and trip["round_trip_ms"] > 0 and trip["transfer_ms"] > 0, trip
        assert ("user" in r["tflops"]) != trip["within_noise"], r
    assert all("user" not in r["tflops"] for r in doc["rows"] if r["pass"] == "bwd")


@pytest.mark.gpu
def test_gpu_bench_kernel_wrong_kernel_has_no_figure():
    """A planted kernel (acc not rescaled) gives wrong outputs at bench sizes: an error, no TFLOP/s."""
    from drill.grader import bench_user

    planted = ROOT / "tests" / "planted" / "flashattention" / "triton-forward" / "acc_not_rescaled.py"
    case = {"d": 128, "s": 4096, "b": 4, "h": 16, "causal": False}
    result = bench_user.time_user_kernel(planted, [case], log=lambda line: None)[bench_user.case_key(case)]
    assert "ms" not in result and result["error"].startswith("wrong output"), result
