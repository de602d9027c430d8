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


def git_root(path: Path) -> Path | None:
    """The top of the git work tree holding `path` (a folder with .git, dir or file), or None."""
    for folder in [path, *path.parents]:
        if (folder / ".git").exists():
            return folder
    return None


def is_drill_checkout(folder: Path) -> bool:
    """True for a checkout of drill's own source (its pyproject names this project)."""
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return 'name = "mlsys-drill"' in text
