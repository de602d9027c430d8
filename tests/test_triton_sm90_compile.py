"""Every honest Triton file compiles for sm_90, in fp16 and bf16, on a machine without a GPU.

The interpreter runs kernels that the GPU compiler refuses: two must-pass backward variants
scaled q in fp32 and then multiplied it by a bf16 tile, passed every CPU test and failed every
check on the H200. tests/triton_sm90_compile.py records each launch of the file's GPU branch and
compiles it for sm_90 (Triton compiles for a GPU it does not have); run in a child process, out of
reach of the interpreter that conftest switches on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "triton_sm90_compile.py"
ENTRIES = {"triton-forward": "flash_attention", "triton-decode": "flash_decode",
           "triton-backward": "flash_attention_backward"}
SOLUTIONS = {"triton-forward": "07_triton_forward.py", "triton-decode": "10_triton_decode.py",
             "triton-backward": "11_triton_backward.py"}
FILES = [(ex, ROOT / "solutions" / "flashattention" / name) for ex, name in SOLUTIONS.items()] + [
    (ex, path) for ex in ENTRIES for path in sorted((ROOT / "tests" / "variants" / "flashattention" / ex).glob("*.py"))]


def compile_for_sm90(path: Path, entry: str) -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path), entry], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("exercise,path", FILES, ids=[f"{ex}/{p.stem}" for ex, p in FILES])
def test_honest_triton_file_compiles_for_sm90(exercise, path):
    results = compile_for_sm90(path, ENTRIES[exercise])
    assert results, "no kernel launch was recorded"
    refused = [f"{r['kernel']} ({r['case']}): {r['error']}" for r in results if not r["ok"]]
    assert not refused, "\n".join(refused)


def test_a_kernel_the_interpreter_runs_and_the_compiler_refuses_is_caught(tmp_path):
    """The variant as it was: q scaled in fp32 and left so, then tl.dot with a bf16 tile."""
    variant = ROOT / "tests" / "variants" / "flashattention" / "triton-backward" / "two_stage_causal_loops.py"
    text = variant.read_text(encoding="utf-8")
    fixed = "(q * sm_scale).to("
    assert fixed in text
    broken = tmp_path / "broken.py"
    broken.write_text("\n".join(line.split("=", 1)[0] + "= q * sm_scale" if fixed in line else line
                                for line in text.splitlines()), encoding="utf-8")
    results = compile_for_sm90(broken, "flash_attention_backward")
    refused = [r for r in results if not r["ok"]]
    assert refused and all("same dtype" in r["error"] for r in refused), results
