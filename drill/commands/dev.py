"""drill dev: commands for people who write exercises (author checks, scaffolding)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.markup import escape

from drill import catalog, exitcodes
from drill.console import console
from drill.errors import cannot


@click.group(name="dev")
def command() -> None:
    """Commands for exercise authors: `dev check` and `dev new`."""


@command.command(name="check")
@click.argument("target", metavar="[TOPIC | TOPIC/ID]", required=False)
@click.option("--planted", "planted_dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Folder of planted wrong implementations, <topic>/<id>/*.py (default: tests/planted "
                   "of the checkout drill runs from).")
def check(target: str | None, planted_dir: Path | None) -> None:
    """Run the author checks: every stub fails, every solution passes, every check fails on some
    planted file, and the catalog, stubs and solutions agree.

    Exit code 0: every rule holds; 1: some do not (each is listed); 2: unknown topic or exercise.
    """
    from drill import authoring

    exercises = _selected(target)
    planted = planted_dir or authoring.planted_root()
    failing = 0
    with tempfile.TemporaryDirectory(prefix="drill-dev-check-") as folder:
        for ex in exercises:
            problems = authoring.check_exercise(
                ex, planted, Path(folder),
                say=lambda line: console.print(f"[muted]{escape(line)}[/muted]", soft_wrap=True))
            if problems:
                failing += 1
                console.print(f"[fail]✗[/fail] {ex.key}", soft_wrap=True)
                for problem in problems:
                    console.print(f"    {escape(problem)}", soft_wrap=True)
            else:
                console.print(f"[pass]✓[/pass] {ex.key}", soft_wrap=True)
    console.print(f"{len(exercises) - failing} of {len(exercises)} exercises pass the author checks.")
    raise SystemExit(exitcodes.FAILED if failing else exitcodes.OK)


def _selected(target: str | None) -> list[catalog.Exercise]:
    if target is None:
        return catalog.all_exercises()
    if target in catalog.topic_names():
        return list(catalog.load_topic(target).exercises)
    ex = catalog.resolve(target)
    if ex is None:
        cannot(f"unknown topic or exercise {target!r}; topics: {', '.join(catalog.topic_names())}")
    return [ex]


@command.command(name="new")
@click.argument("key", metavar="TOPIC/ID")
@click.option("--title", help="The exercise's title (default: from its id).")
@click.option("--root", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="drill's source checkout to write into (default: the one drill runs from).")
def new(key: str, title: str | None, root: Path | None) -> None:
    """Scaffold a new exercise: stub, solution, checks file, catalog entry and planted-file folder."""
    from drill import paths, scaffold

    root = (root or paths.exercises_root().parent).resolve()
    planned = scaffold.plan(root, key, title)
    written = scaffold.write(planned)
    console.print(f"scaffolded [accent]{planned.key}[/accent] as {planned.file}:", soft_wrap=True)
    for path in written:
        console.print(f"  {escape(str(path.relative_to(root)))}", soft_wrap=True)
    console.print(f"Next: write the contract, the checks and at least five more planted mistakes, "
                  f"then [accent]drill dev check {planned.key}[/accent].", soft_wrap=True)
