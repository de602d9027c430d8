"""drill reset EXERCISE: put the stub back, keeping a timestamped copy of your file."""

from __future__ import annotations

from pathlib import Path

import click

from drill import catalog, stubs
from drill.attempts import search_folders
from drill.console import console
from drill.errors import cannot
from drill.paths import shown
from drill.store import Store


@click.command(name="reset")
@click.argument("exercise")
def command(exercise: str) -> None:
    """Restore EXERCISE's stub (an id, a number or a file); your version is kept as a .bak copy.

    The file is looked for in the folder you stand in, then in the workspace.
    Progress, hints and card reviews are not changed.
    """
    given = Path(exercise).expanduser()
    if given.is_file():
        ex, path = catalog.identify(given), given
        if ex is None:
            cannot(f"{shown(given)} is not a drill exercise; name one of: {catalog.known_ids()}")
    else:
        ex = catalog.resolve(exercise)
        if ex is None:
            cannot(f"unknown exercise {exercise!r}; known: {catalog.known_ids()}")
        with Store() as store:
            folders = search_folders(store)
            home = store.workspace(ex.topic)
        found = [f / ex.file for f in folders if (f / ex.file).is_file()]
        if found:
            path = found[0]
        elif home is not None and home.is_dir():
            path = home / ex.file  # missing from the workspace: put it back
        else:
            cannot(f"no {ex.file} here and no {ex.topic} workspace: run drill start {ex.topic}")
    try:
        backup = stubs.restore(ex, path)
    except OSError as exc:
        cannot(f"could not reset {shown(path)}: {exc.strerror or exc}")
    where = shown(path)
    if backup is None:
        console.print(f"{where} is the fresh stub of {ex.id}; nothing to keep.", soft_wrap=True, markup=False)
    else:
        console.print(f"reset {where} to the stub; your version is in {shown(backup.name)}",
                      soft_wrap=True, markup=False)
