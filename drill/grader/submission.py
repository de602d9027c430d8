"""The user's module, loaded once in the worker and handed to checks as the `sub` fixture
(drill/grader/fixtures.py)."""

from __future__ import annotations

from types import ModuleType

_loaded: ModuleType | None = None
_path: str = ""


def set_loaded(module: ModuleType, path: str) -> None:
    global _loaded, _path
    _loaded, _path = module, path


def loaded() -> ModuleType:
    if _loaded is None:
        raise RuntimeError("no submission loaded: hidden checks run only through `drill check`")
    return _loaded


def path() -> str:
    return _path
