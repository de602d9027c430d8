"""Where drill keeps its state and where the packaged content lives."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def home() -> Path:
    """The state directory: $DRILL_HOME, else the platform's user data directory."""
    override = os.environ.get("DRILL_HOME")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("drill", appauthor=False))


def database() -> Path:
    return home() / "drill.sqlite3"


def exercises_root() -> Path:
    return Path(str(resources.files("drill.exercises")))


def solutions_root() -> Path:
    return Path(str(resources.files("drill.solutions")))


def shown(path: os.PathLike | str) -> str:
    """A path as text that can always be printed: bytes that are not UTF-8 appear as �."""
    return os.fsencode(path).decode("utf-8", "replace")
