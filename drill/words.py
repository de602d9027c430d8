"""Counting words right, with no dependency (the grader's processes may use it too)."""

from __future__ import annotations


def plural(count: int, word: str, many: str | None = None) -> str:
    """'1 file', '10 files', '1 check', '2 matches' (pass `many` for irregular words)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
