"""drill solution EXERCISE: the reference solution, once the exercise is passed."""

from __future__ import annotations

import click
from rich.syntax import Syntax

from drill import catalog
from drill.console import console, err_console
from drill.errors import cannot
from drill.store import Store


@click.command(name="solution")
@click.argument("exercise")
@click.option("--force", is_flag=True, help="Show it even though you have not passed yet.")
def command(exercise: str, force: bool) -> None:
    """Show the reference solution of EXERCISE (after you pass it, or with --force)."""
    ex = catalog.resolve(exercise)
    if ex is None:
        cannot(f"unknown exercise {exercise!r}; known: {catalog.known_ids()}")
    with Store() as store:
        passed = store.passed(ex.key)
    if not passed and not force:
        cannot(f"you have not passed {ex.id} yet; the solution opens after a pass. "
               f"Try `drill hint {ex.id}`, or `drill solution {ex.id} --force` to see it anyway.")
    if not passed:
        err_console.print("[warn]Showing the solution before you have passed: reading it now makes the "
                      "exercise much less useful.[/warn]")
    text = ex.solution_path.read_text(encoding="utf-8")
    if not console.is_terminal:
        click.echo(text, nl=False)  # plain, so `drill solution X > file.py` gives runnable code
        return
    console.print(Syntax(text, "python", line_numbers=True, word_wrap=True))
