"""`pip install .` ships every topic's content (found by setup.py, never listed by hand)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where it lands in the installed tree
CONTENT = {"drill": "drill", "exercises": "drill/exercises", "solutions": "drill/solutions", "kernels": "drill/kernels"}


def shipped_sources() -> set[str]:
    """Every Python and TOML file of the source tree, as the installed path it must have."""
    files = set()
    for folder, installed in CONTENT.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts and path.is_file():
                files.add(f"{installed}/{path.relative_to(ROOT / folder).as_posix()}")
    return files


@pytest.mark.slow
def test_pip_install_ships_every_topic(tmp_path):
    # pip builds in the source folder (build/, *.egg-info): build a copy, not the checkout.
    source = tmp_path / "source"
    for name in [*CONTENT, "setup.py", "pyproject.toml", "README.md"]:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (ROOT / name).is_dir() else {}))
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                           str(source)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and ("Could not find a version" in proc.stderr or "NewConnectionError" in proc.stderr):
        pytest.skip("pip cannot fetch the build backend here (offline)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    installed = {p.relative_to(target).as_posix() for p in (target / "drill").rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    missing = sorted(shipped_sources() - installed)
    assert not missing, f"not installed: {missing}"
    topics = {p.parent.name for p in (ROOT / "exercises").glob("*/catalog.toml")}
    assert topics and all((target / "drill" / "exercises" / t / "checks" / "__init__.py").is_file() for t in topics)
