"""The advice for a missing torch fits the machine, and the README says the same."""

from __future__ import annotations

import re
from pathlib import Path

from drill import install_hint

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_cpu_machine_gets_the_cpu_wheel_index():
    advice = install_hint.missing_package_advice("torch", gpu=False)
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in advice
    assert "torch triton" in advice and "CPU build" in advice


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
    assert len(cpu) == 1 and "'.[torch]'" in cpu[0] and "--extra-index-url" in cpu[0]
    assert len(gpu) == 1
