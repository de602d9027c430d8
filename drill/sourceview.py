"""Where in the learner's file a load problem is, shown as Python shows it.

The subject process reports a syntax error or an exception raised while the file was
imported in one line; this turns it into the frame Python would print: the real path,
the line number, the source line and, for a syntax error, a caret under the spot.
The file is only compiled here, never run (compiling executes none of its code).
Standard library only.
"""

from __future__ import annotations

import re
import traceback

_SYNTAX = re.compile(r"^syntax error in your file, line (\d+)")
_RAISED = re.compile(r"^your file raised \w+ at line (\d+) while being imported")


def load_frame(message: str, source: bytes, path: str) -> str:
    """The frame for a load error message ('' when the message names no line of the file)."""
    if _SYNTAX.match(message):
        frame = syntax_frame(source, path)
        if frame:
            return frame
    match = _SYNTAX.match(message) or _RAISED.match(message)
    return line_frame(source, path, int(match.group(1))) if match else ""


def syntax_frame(source: bytes, path: str) -> str:
    """Python's own rendering of the file's syntax error (path, line, source, caret); '' if it compiles."""
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        lines = traceback.format_exception_only(type(exc), exc)
        return "".join(lines).rstrip("\n")
    except (ValueError, MemoryError, RecursionError):  # null bytes, absurd nesting
        return ""
    return ""


def line_frame(source: bytes, path: str, line: int) -> str:
    """'  File "PATH", line N' and the source line, as in a traceback."""
    lines = source.decode("utf-8", "replace").removeprefix("\ufeff").splitlines()
    text = f'  File "{path}", line {line}'
    if 1 <= line <= len(lines) and lines[line - 1].strip():
        text += "\n    " + lines[line - 1].strip()[:200]
    return text
