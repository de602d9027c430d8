"""Read a learner's file safely: a regular file of reasonable size, or a clear reason why not.

A FIFO would block a plain open() forever and /dev/zero would fill memory, so the file is
opened without blocking, checked with fstat, and read up to a cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

LIMIT_BYTES = 1024 * 1024  # far above any exercise file


class UnreadableFile(Exception):
    """The file is not something drill will read; the message says why, in one line."""


def read_bytes(path: Path, limit: int = LIMIT_BYTES, follow_links: bool = True) -> bytes:
    """The file's bytes, or UnreadableFile. follow_links=False for files an untrusted process wrote."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnreadableFile(f"cannot read {os.fsdecode(path)}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(f"{os.fsdecode(path)} is not a regular file (a pipe, a device or a socket?)")
        if info.st_size > limit:
            raise UnreadableFile(f"{os.fsdecode(path)} is {info.st_size // 1024} KB: too large to be an exercise file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnreadableFile(f"{os.fsdecode(path)} is too large to be an exercise file")
    return data


def holds(path: Path, expected: bytes) -> bool:
    """True when `path` is a regular file holding exactly `expected`. Never blocks or reads past
    len(expected): a FIFO, a device or a huge file is simply not equal."""
    try:
        return read_bytes(path, limit=len(expected)) == expected
    except UnreadableFile:
        return False


def is_regular(path: Path) -> bool:
    """True for a regular file (links followed); False for a directory, a FIFO, a device or nothing."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def head_lines(path: Path, count: int = 10) -> list[str]:
    """The first lines of the file as text (a UTF-8 byte-order mark removed); [] if unreadable."""
    try:
        text = read_bytes(path).decode("utf-8", "replace")
    except UnreadableFile:
        return []
    return text.removeprefix("\ufeff").splitlines()[:count]
