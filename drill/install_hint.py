"""What to type when PyTorch or Triton is missing, for the machine drill runs on.

PyPI's Linux torch wheel brings several GB of CUDA libraries; a machine without an
NVIDIA GPU wants the CPU build from PyTorch's own index instead. The README gives
the same two commands (tests/test_install_hint.py keeps them in step).
"""

from __future__ import annotations

import shutil

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
GPU_PACKAGES = ("torch", "triton")


def nvidia_driver_present() -> bool:
    """nvidia-smi is on PATH: an NVIDIA driver is installed (CUDA itself may still not work)."""
    return shutil.which("nvidia-smi") is not None


def torch_install_command(gpu: bool | None = None) -> str:
    """One pip command that installs PyTorch and Triton right for this machine.

    With --extra-index-url (not --index-url) Triton still comes from PyPI, and pip prefers
    the CPU index's torch because its version (2.x.y+cpu) sorts after PyPI's 2.x.y.
    """
    gpu = nvidia_driver_present() if gpu is None else gpu
    command = "python -m pip install torch triton"
    return command if gpu else f"{command} --extra-index-url {CPU_INDEX}"


def missing_package_advice(package: str, gpu: bool | None = None) -> str:
    """The advice to add after "your file imports 'torch', which is not installed here";
    '' for packages drill gives no advice about (a typo is not something to pip install)."""
    if package not in GPU_PACKAGES:
        return ""
    gpu = nvidia_driver_present() if gpu is None else gpu
    which = "PyTorch and Triton" if gpu else "the CPU build of PyTorch (no CUDA download) and Triton"
    return f"install {which} with: {torch_install_command(gpu)}"
