"""`drill bench` without a GPU: one clear line, exit code 2, and no torch at CLI start-up."""

from __future__ import annotations

import subprocess
import sys

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
    import json

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
