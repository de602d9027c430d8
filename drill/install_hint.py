"""What to type when PyTorch or Triton is missing, and which PyTorch build is installed.

PyPI's Linux torch wheel brings several GB of CUDA libraries; a machine without an
NVIDIA GPU wants the CPU build from PyTorch's own index instead. That build is asked
for with --index-url, as PyTorch documents, in a step of its own: with
--extra-index-url pip falls back to PyPI's CUDA wheel, silently, when the CPU index
cannot be reached. The README gives the same commands (tests/test_install_hint.py
keeps them in step).

`torch_build()` reads the installed build without importing torch (which takes
seconds), so `drill status` can say which one a machine has.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
GPU_PACKAGES = ("torch", "triton")


def nvidia_driver_present() -> bool:
    """nvidia-smi is on PATH: an NVIDIA driver is installed (CUDA itself may still not work)."""
    return shutil.which("nvidia-smi") is not None


def torch_install_command(gpu: bool | None = None) -> str:
    """The pip command that installs PyTorch and Triton right for this machine.

    Without a GPU: torch alone from the CPU index (--index-url: if that index cannot be
    reached, pip fails instead of taking PyPI's CUDA wheel), then Triton from PyPI.
    """
    gpu = nvidia_driver_present() if gpu is None else gpu
    if gpu:
        return "python -m pip install torch triton"
    return f"python -m pip install torch --index-url {CPU_INDEX} && python -m pip install triton"


@dataclass(frozen=True)
class TorchBuild:
    version: str  # '2.13.0+cpu'
    cuda: str | None  # the CUDA version it was built for ('12.8'), None for a CPU build

    @property
    def kind(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def in_words(self) -> str:
        return f"PyTorch {self.version}, " + (f"the CUDA {self.cuda} build" if self.cuda else "the CPU build")


_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(None|'([^']*)'|\"([^\"]*)\")", re.M)
_VERSION_LINE = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.M)


def torch_build() -> TorchBuild | None:
    """The installed PyTorch build, read from torch/version.py without importing torch; None if
    PyTorch is not installed."""
    from importlib.util import find_spec
    from pathlib import Path

    try:
        spec = find_spec("torch")  # finds the package; runs none of it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        version = _VERSION_LINE.search(text)
        cuda = _CUDA_LINE.search(text)
        number = version.group(1) if version else _distribution_version("torch") or "?"
        built_for = (cuda.group(2) or cuda.group(3)) if cuda and cuda.group(1) != "None" else None
        return TorchBuild(number, built_for or None)
    return TorchBuild(_distribution_version("torch") or "?", None)


def _distribution_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def triton_version() -> str | None:
    return _distribution_version("triton")


def torch_report(gpu: bool | None = None) -> tuple[str, str]:
    """(one line on the PyTorch and Triton found, a warning or '') for `drill status`."""
    gpu = nvidia_driver_present() if gpu is None else gpu
    build, triton = torch_build(), triton_version()
    triton_text = f"Triton {triton}" if triton else "no Triton (07 and 10 need it)"
    if build is None:
        return (f"PyTorch: not installed (06, 07 and 10 need it); {triton_text}",
                f"install it with: {torch_install_command(gpu)}")
    line = f"{build.in_words()}; {triton_text}"
    if build.cuda and not gpu:
        return line, ("this is the CUDA build, and no NVIDIA driver is here (no nvidia-smi): its CUDA libraries "
                      "take several GB and are never used. The CPU build: python -m pip uninstall -y torch && "
                      f"python -m pip install torch --index-url {CPU_INDEX}")
    if not build.cuda and gpu:
        return line, ("this is the CPU build on a machine with an NVIDIA driver: 07 and 10 run under "
                      "Triton's interpreter, not on the GPU. The CUDA build: python -m pip uninstall -y torch && "
                      "python -m pip install torch")
    return line, ""


def missing_package_advice(package: str, gpu: bool | None = None) -> str:
    """The advice to add after "your file imports 'torch', which is not installed here";
    '' for packages drill gives no advice about (a typo is not something to pip install)."""
    if package not in GPU_PACKAGES:
        return ""
    gpu = nvidia_driver_present() if gpu is None else gpu
    which = "PyTorch and Triton" if gpu else "the CPU build of PyTorch (no CUDA download) and Triton"
    return f"install {which} with: {torch_install_command(gpu)}"
