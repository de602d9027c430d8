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
    config.addinivalue_line("markers", "full: graded only with DRILL_FULL_MATRIX=1 (tests/sampling.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from sampling import FULL, SKIP_REASON

    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        elif "full" in item.keywords and not FULL:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(autouse=True)
def drill_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own state directory; the user's real progress is never touched."""
    home = tmp_path_factory.mktemp("drill-home")
    monkeypatch.setenv("DRILL_HOME", str(home))
    monkeypatch.setenv("DRILL_WHATIF_BACKGROUND", "0")  # a test that wants drill check's background grading says so
    return home
