"""Drive a drill command in a real pseudo-terminal: pexpect types, pyte keeps the screen.

`wait_for` polls what the screen shows (not the raw byte stream), so a test reads
what a person would see. Every wait is bounded; `close` always ends the child.
"""

from __future__ import annotations

import os
import sys
import time

import pexpect
import pyte

COLUMNS, ROWS = 120, 50


def as_from_a_terminal() -> None:
    """A subprocess's preexec_fn: the child gets Ctrl-C as a shell would start it, whatever signal
    state this test process was left with (a blocked or ignored SIGINT passes on to children)."""
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    def __init__(self, *args: str, cwd: str | None = None, columns: int = COLUMNS, rows: int = ROWS):
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", PYTHONUNBUFFERED="1")
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.history = b""  # everything written, for messages when a wait fails
        self.child = pexpect.spawn(sys.executable, ["-m", "drill", *args], cwd=cwd, env=env,
                                   dimensions=(rows, columns), timeout=30)

    def pump(self, seconds: float = 0.1) -> None:
        """Feed whatever the child wrote within `seconds` to the screen."""
        end = time.monotonic() + seconds
        while True:
            try:
                chunk = self.child.read_nonblocking(65536, timeout=max(0.0, end - time.monotonic()))
            except pexpect.TIMEOUT:
                return
            except pexpect.EOF:
                return
            self.history += chunk
            self.stream.feed(chunk)
            if time.monotonic() >= end:
                return

    @property
    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, needle: str, limit: float = 30) -> str:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            self.pump(0.1)
            if needle in self.text:
                return self.text
            if not self.child.isalive():
                self.pump(0.2)
                if needle in self.text:
                    return self.text
                break
        raise AssertionError(f"{needle!r} not on screen after {limit} s; screen:\n{self.text}\n"
                             f"alive: {self.child.isalive()}")

    def type(self, keys: str) -> None:
        self.child.send(keys)

    def exit_status(self, limit: float = 20) -> int:
        end = time.monotonic() + limit
        while self.child.isalive() and time.monotonic() < end:
            self.pump(0.1)
        if self.child.isalive():
            raise AssertionError(f"still running after {limit} s; screen:\n{self.text}")
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
