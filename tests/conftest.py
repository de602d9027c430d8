"""Shared test set-up: a throwaway DRILL_HOME, the gpu marker, Triton's interpreter on CPUs."""

from __future__ import annotations

import os
import shutil

import pytest

HAS_GPU = shutil.which("nvidia-smi") is not None
if not HAS_GPU:
    # Triton kernels run under the interpreter when there is no GPU.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (run by kernels/benchmarks/suite.py on the device)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds on a CPU")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def drill_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own state directory; the user's real progress is never touched."""
    home = tmp_path_factory.mktemp("drill-home")
    monkeypatch.setenv("DRILL_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _escapee_name_per_worker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Parallel workers (pytest-xdist) each get their own name for an attack's escaped processes.

    The red-team tests name every process an attack starts after the module's MARKER and, after
    grading, look for survivors of that name anywhere on the machine: with two workers, one
    worker's attack still being graded would count as the other's survivor. A name per worker
    (at most 15 characters, the kernel's limit for a process name) keeps each search to its own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    module = getattr(request, "module", None)
    marker = getattr(module, "MARKER", None)
    if worker and marker == "drill-escapee":
        monkeypatch.setattr(module, "MARKER", f"drill-escapee{worker.removeprefix('gw')}"[:15])
