"""The advice for a missing torch fits the machine, and the README says the same."""

from __future__ import annotations

import re
from pathlib import Path

from drill import install_hint

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_cpu_machine_gets_the_cpu_wheel_index():
    advice = install_hint.missing_package_advice("torch", gpu=False)
    # --index-url for torch itself: with --extra-index-url pip silently takes PyPI's CUDA wheel
    # when the CPU index cannot be reached.
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in advice
    assert "extra-index-url" not in advice
    assert "pip install triton" in advice and "CPU build" in advice


def test_gpu_machine_gets_plain_pypi():
    advice = install_hint.missing_package_advice("triton", gpu=True)
    assert advice.endswith("python -m pip install torch triton") and "whl/cpu" not in advice


def test_no_advice_for_other_packages():
    assert install_hint.missing_package_advice("numpyy", gpu=False) == ""


def test_the_guess_follows_nvidia_smi(monkeypatch):
    monkeypatch.setattr(install_hint.shutil, "which", lambda name: None)
    assert "whl/cpu" in install_hint.torch_install_command()
    monkeypatch.setattr(install_hint.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert "whl/cpu" not in install_hint.torch_install_command()


def test_readme_gives_a_cpu_and_a_gpu_command_with_the_torch_extra():
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    commands = [line for block in blocks for line in block.splitlines() if "drill start" in line]
    cpu = [c for c in commands if install_hint.CPU_INDEX in c]
    gpu = [c for c in commands if install_hint.CPU_INDEX not in c and "[torch]" in c]
    assert len(cpu) == 1 and "'.[torch]'" in cpu[0]
    # torch alone from the CPU index, before the extra, so the extra finds it installed
    assert cpu[0].startswith(f"python -m pip install torch --index-url {install_hint.CPU_INDEX} && ")
    assert "extra-index-url" not in README
    assert len(gpu) == 1


def test_the_test_command_is_the_one_ci_runs():
    # The learner's install takes torch from the CPU index (above); the test command pins
    # torch==2.13.0, which this project's machines and CI serve as a CPU build.
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    tests = [line for block in blocks for line in block.splitlines() if "pytest" in line]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text(encoding="utf-8")
    assert len(tests) == 1 and "torch==2.13.0" in tests[0] and tests[0] in ci


def test_the_installed_build_is_read_without_importing_torch(tmp_path, monkeypatch):
    import sys

    for version, cuda, kind in (("2.13.0+cpu", "None", "cpu"), ("2.14.1", "'12.8'", "cuda")):
        package = tmp_path / kind / "torch"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("raise SystemExit('torch must not be imported')\n")
        (package / "version.py").write_text(
            f"from typing import Optional\n__version__ = '{version}'\ncuda: Optional[str] = {cuda}\n")
        monkeypatch.syspath_prepend(str(tmp_path / kind))
        monkeypatch.delitem(sys.modules, "torch", raising=False)
        build = install_hint.torch_build()
        assert build.version == version and build.kind == kind and "torch" not in sys.modules
        line, warning = install_hint.torch_report(gpu=False)
        assert ("the CPU build" if kind == "cpu" else "the CUDA 12.8 build") in line
        assert (warning == "") == (kind == "cpu")
        if kind == "cuda":
            assert f"--index-url {install_hint.CPU_INDEX}" in warning
        monkeypatch.undo()
