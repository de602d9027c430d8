"""The one rich Console every command prints through."""

from __future__ import annotations

import sys

from rich.console import Console
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

console = Console(theme=THEME, highlight=False)
err_console = Console(theme=THEME, stderr=True, highlight=False)


def interactive() -> bool:
    """True when a person is at the keyboard (stdin and stdout are terminals)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def fail_line(message: str) -> None:
    """One plain line on stderr saying why a command could not do its job."""
    # Escaped: messages quote file names and advice such as pip install 'mlsys-drill[plot]'.
    err_console.print(f"[error]drill:[/error] {escape(message)}", soft_wrap=True)
