"""Where the user's own code was when an exception passed through it.

Standalone (standard library only): the untrusted scripts that describe the user's errors
import a copy of it from their scratch folder, subject.py (copied by proxy.Subject.start)
and 06's ring harness (copied by its checks), so the rule is written once.
"""

from __future__ import annotations

import traceback


def user_frames(exc: BaseException, user_file: str) -> list[traceback.FrameSummary]:
    """The traceback's frames that are in the user's file, outermost first."""
    return [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == user_file]


def user_line(exc: BaseException, user_file: str) -> int | None:
    """The line of the deepest frame in the user's file: the user's own line closest to the
    error (a library call it made may have raised below it). None when no frame is theirs."""
    frames = user_frames(exc, user_file)
    return frames[-1].lineno if frames else None
