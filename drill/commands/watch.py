"""drill watch [FILE]: re-check a file every time it is saved.

The loop waits on one queue fed by two threads: a watchfiles watcher on the
file's directory (editors often save by writing a new file and renaming it, so
the directory is watched, not the file) and a reader on stdin for the keys
(Enter re-runs, n moves on to the next exercise after a pass, q quits). On a terminal
the keys act at once (cbreak mode); from a pipe, one command per line.
`run_cycle` is one check and its report, usable without a terminal (--once).
"""

from __future__ import annotations

import codecs
import os
import queue
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Group
from rich.text import Text

from drill import catalog, exitcodes, progress
from drill.attempts import exit_code, file_to_grade, grade_file, next_step, shown_path
from drill.console import console, interactive, single_keys
from drill.errors import cannot
from drill.store import Store

CHANGED, KEY = "changed", "key"
ESCAPE_SEQUENCE = re.compile(r"\x1b(\[[0-9;]*[A-Za-z~]|.)?")  # arrow keys and the like: ignored
KEYS_HELP = "save the file to re-check · Enter: re-run · q: quit"
LINE_KEYS_HELP = "save the file to re-check · Enter: re-run · q then Enter: quit"  # stdin is not a terminal


@dataclass
class Cycle:
    """One check of one file: the report to show and where to go next."""
    path: Path
    exercise: catalog.Exercise | None
    result: object | None  # GradeResult, or None when the file could not be identified
    reason: str = ""
    next_exercise: catalog.Exercise | None = None
    next_path: Path | None = None

    @property
    def exit_code(self) -> int:
        if self.result is None:
            return exitcodes.CANNOT
        return exit_code(self.result)


def run_cycle(path: Path, store: Store, timeout: float | None = None) -> Cycle:
    """Grade `path` once (recording the attempt, as `drill check` does)."""
    if not path.exists():
        return Cycle(path, None, None, f"{path} does not exist (yet): save it to check it")
    ex, result = grade_file(path, timeout, store)
    if ex is None:
        return Cycle(path, None, None, result)
    cycle = Cycle(path, ex, result)
    if result.status == "pass":
        cycle.next_exercise = progress.current(store, ex.topic)
        if cycle.next_exercise:
            # The workspace's copy, else a file of that name beside the one just passed.
            home = store.workspace(ex.topic)
            for folder in (home, path.parent):
                if folder and (folder / cycle.next_exercise.file).is_file():
                    cycle.next_path = folder / cycle.next_exercise.file
                    break
    return cycle


def render_cycle(cycle: Cycle, store: Store, keys: bool = False, instant: bool = True) -> Group:
    """The latest report, then what to do next."""
    from drill.report import report

    parts = []
    if keys:
        head = Text()
        head.append("drill watch ", style="accent")
        head.append(f"{cycle.path}  ·  checked {time.strftime('%H:%M:%S')}\n", style="muted")
        head.append((KEYS_HELP if instant else LINE_KEYS_HELP) + (" · n: next exercise" if cycle.next_path else ""),
                    style="muted")
        parts.append(head)
    if cycle.result is None:
        parts.append(Text(f"not graded: {cycle.reason}", style="error"))
        return Group(*parts)
    parts.append(report(cycle.result, f"{cycle.exercise.key}  ({shown_path(cycle.path)})",
                        plain=not console.is_terminal))
    if cycle.result.status == "pass":
        nxt = cycle.next_exercise
        if nxt is None:
            parts.append(Text.from_markup(progress.all_passed_step(cycle.exercise.topic)))
        elif cycle.next_path and keys:
            parts.append(Text.from_markup(
                f"Next: [accent]{nxt.file}[/accent] ({nxt.title}). Press [accent]n[/accent]"
                f"{'' if instant else ' then Enter'} to "
                f"watch it, or compare first: drill solution {cycle.exercise.id}"))
        else:
            where = cycle.next_path or nxt.file
            parts.append(Text.from_markup(
                f"Next: [accent]{nxt.file}[/accent] ({nxt.title}): [accent]drill watch {where}[/accent]"))
    else:
        step = next_step(cycle.exercise, cycle.result.status, store)
        if step:
            parts.append(Text.from_markup(step))
    return Group(*parts)


# -- the loop -------------------------------------------------------------------


class FileWatcher:
    """Puts CHANGED on `events` whenever the file named `path` is written or replaced."""

    def __init__(self, path: Path, events: queue.Queue):
        self.path = path.resolve()
        self.events = events
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="drill-watch-files", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import watchfiles

        name = self.path.name
        try:
            for _ in watchfiles.watch(self.path.parent, stop_event=self.stop, debounce=300, step=50,
                                      watch_filter=lambda change, p: Path(p).name == name,
                                      raise_interrupt=False, recursive=False):
                self.events.put((CHANGED, None))
        except Exception as exc:  # a vanished directory, too many watches: keys still work
            self.events.put((KEY, f"\0watcher stopped: {exc}"))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)


def read_keys(events: queue.Queue, fd: int = 0, instant: bool = False) -> threading.Thread:
    """A thread that puts what is typed on stdin on the queue as (KEY, text).

    instant (a terminal in cbreak mode): every key at once, Enter as ''. Otherwise one
    (KEY, line) per line. os.read, not sys.stdin: a daemon thread blocked inside
    sys.stdin's buffered reader can abort the interpreter at exit.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def run() -> None:
        pending = ""
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                return
            if not chunk:
                return  # end of input: file changes still trigger checks
            pending += decoder.decode(chunk)
            if instant:
                for key in ESCAPE_SEQUENCE.sub("", pending):
                    if key in ("\r", "\n"):
                        events.put((KEY, ""))
                    elif key.isprintable():
                        events.put((KEY, key))
                pending = ""
                continue
            while "\n" in pending:
                line, pending = pending.split("\n", 1)
                events.put((KEY, line))

    thread = threading.Thread(target=run, name="drill-watch-keys", daemon=True)
    thread.start()
    return thread


def watch_loop(path: Path, store: Store, timeout: float | None, events: queue.Queue,
               watcher_factory=FileWatcher, show=None, instant: bool = False) -> int:
    """Check, show, wait for a save or a key; until q. Returns the last check's exit code."""
    show = show or _show
    watcher = watcher_factory(path, events)
    try:
        cycle = _check_and_show(path, store, timeout, show, instant)
        while True:
            kind, value = events.get()
            if kind == CHANGED:
                _drain(events, CHANGED)  # one check for a burst of saves
                if path.exists():
                    cycle = _check_and_show(path, store, timeout, show, instant)
                continue
            key = value.strip().lower()
            if key.startswith("\0"):
                show(Text(key[1:] + "; press Enter to re-run by hand", style="warn"))
            elif key in ("q", "quit", "exit"):
                return cycle.exit_code
            elif key == "n" and cycle.next_path:
                watcher.close()
                path = cycle.next_path
                watcher = watcher_factory(path, events)
                cycle = _check_and_show(path, store, timeout, show, instant)
            elif key == "n":
                show(Text("n moves on once this file passes and the next exercise's file is in your "
                          "workspace (drill start puts it there)", style="muted"))
            elif key in ("", "r"):
                cycle = _check_and_show(path, store, timeout, show, instant)
            else:
                show(Text(f"unknown key {key!r}: {KEYS_HELP if instant else LINE_KEYS_HELP}", style="muted"))
    finally:
        watcher.close()


def _drain(events: queue.Queue, kind: str) -> None:
    kept = []
    while True:
        try:
            item = events.get_nowait()
        except queue.Empty:
            break
        if item[0] != kind:
            kept.append(item)
    for item in kept:
        events.put(item)


def _check_and_show(path: Path, store: Store, timeout: float | None, show, instant: bool = False) -> Cycle:
    with console.status(f"checking {path.name} …"):
        cycle = run_cycle(path, store, timeout)
    show(render_cycle(cycle, store, keys=True, instant=instant), clear=True)
    return cycle


def _show(renderable, clear: bool = False) -> None:
    if clear and console.is_terminal:
        console.clear()
    console.print(renderable, soft_wrap=not console.is_terminal)


@click.command(name="watch")
@click.argument("target", metavar="[FILE]", required=False)
@click.option("--once", is_flag=True, help="Check once, print the report and exit (exit code as drill check).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help=f"Seconds before one check stops (default: the exercise's own limit: "
                   f"{catalog.timeouts_in_words()}).")
def command(target: str | None, once: bool, timeout: float | None) -> None:
    """Re-check FILE every time it is saved (default: the current exercise in your workspace).

    Enter re-runs by hand, n moves on to the next exercise after a pass, q (or Ctrl-C) quits.
    """
    with Store() as store:
        path, reason = file_to_grade(target, store)
        if path is None:
            cannot(reason)
        if once:
            cycle = run_cycle(path, store, timeout)
            if cycle.result is None:
                cannot(cycle.reason)
            console.print(render_cycle(cycle, store), soft_wrap=not console.is_terminal)
            raise SystemExit(cycle.exit_code)
        events: queue.Queue = queue.Queue()
        try:
            with single_keys() as instant:
                read_keys(events, instant=instant)
                code = watch_loop(path, store, timeout, events, instant=instant)
        except KeyboardInterrupt:
            console.print("\n[muted]stopped watching[/muted]")
            raise SystemExit(exitcodes.OK)
    if not interactive():
        raise SystemExit(code)
