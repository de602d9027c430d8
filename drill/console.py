"""The one rich Console every command prints through."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager

from rich.console import Console, ConsoleDimensions, RenderableType
from rich.markup import escape
from rich.theme import Theme

THEME = Theme(
    {
        "pass": "bold green",
        "fail": "bold red",
        "error": "bold magenta",
        "muted": "grey50",
        "accent": "bold cyan",
        "warn": "yellow",
    }
)

# Output to a file or a pipe has no width of its own; rich would take the terminal's (or 80)
# and cut table columns. Piped tables get this many columns; prose is printed with soft_wrap.
PIPED_WIDTH = 160


# Spaces at the end of a line, before any closing style codes: rich pads table cells and
# markdown to the width, which a terminal hides but a file or a pipe keeps.
_TRAILING_SPACES = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)


class DrillConsole(Console):
    def _render_buffer(self, buffer) -> str:
        text = super()._render_buffer(buffer)
        if not self.is_terminal:
            text = _TRAILING_SPACES.sub(r"\1", text)
        return text

    def _piped_size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS"):
            return ConsoleDimensions(max(size.width, PIPED_WIDTH), size.height)
        return size

    size = property(_piped_size, Console.size.fset)


console = DrillConsole(theme=THEME, highlight=False)
err_console = DrillConsole(theme=THEME, stderr=True, highlight=False)


def boxed(body: RenderableType, title: str = "", **panel_options) -> RenderableType:
    """A panel on a terminal; piped, the title on its own line and the body unframed, so prose
    is not cut into the box's width (print it with soft_wrap=True)."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    if console.is_terminal:
        return Panel(body, title=title or None, title_align="left", **panel_options)
    return Group(Text.from_markup(title), body) if title else body


def interactive() -> bool:
    """True when a person is at the keyboard (stdin and stdout are terminals)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def read_piped_answer(prompt: str) -> str:
    """One answer line from a pipe, echoed after its prompt so a transcript reads like the live
    exchange; EOFError when the input has run out."""
    from rich.text import Text

    console.print(Text(f"{prompt}: ", style="muted"), end="", soft_wrap=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    console.print(Text(line.rstrip("\n")), soft_wrap=True)
    return line.strip()


def fail_line(message: str) -> None:
    """One plain line on stderr saying why a command could not do its job."""
    # Escaped: messages quote file names and advice such as pip install 'mlsys-drill[plot]'.
    err_console.print(f"[error]drill:[/error] {escape(message)}", soft_wrap=True)


@contextmanager
def single_keys(fd: int = 0):
    """cbreak mode on a terminal, so keys act without Enter (Ctrl-C still interrupts);
    yields whether it is on. The terminal is restored however the block ends."""
    if not os.isatty(fd):
        yield False
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


_ESCAPE = re.compile(r"\x1b(\[[0-9;]*[A-Za-z~]|O.|.)?")


def read_key(fd: int = 0) -> str:
    """One key from a terminal without waiting for Enter: the character typed, '' for Enter.
    Arrow keys and other escape sequences are skipped; Ctrl-D raises EOFError."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with single_keys(fd):
        while True:
            chunk = os.read(fd, 32)
            if not chunk or chunk == b"\x04":
                raise EOFError
            text = _ESCAPE.sub("", decoder.decode(chunk))
            for key in text:
                if key in ("\r", "\n"):
                    return ""
                if key.isprintable():
                    return key


def fitting(build, counts, target: Console | None = None):
    """The first of build(n) for n in counts whose natural width fits the console: a table with
    fewer columns rather than one whose ids and states are cut with an ellipsis.

    build(n, measuring=True) is measured: there, a column that may wrap gets its narrowest width as
    its max_width, so only the columns that must not wrap count at their full width."""
    from rich.measure import Measurement

    target = target or console
    unbounded = target.options.update_width(100_000)  # measured as if the terminal had no edge
    for n in counts:
        if Measurement.get(target, unbounded, build(n, measuring=True)).maximum <= target.width:
            return build(n)
    return build(counts[-1])
