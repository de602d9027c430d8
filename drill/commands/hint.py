"""drill hint [EXERCISE]: reveal hints one at a time."""

from __future__ import annotations

import click
from rich.text import Text

from drill import catalog, progress
from drill.console import boxed, console
from drill.errors import cannot
from drill.store import Store


@click.command(name="hint")
@click.argument("exercise", required=False)
@click.option("--all", "show_all", is_flag=True, help="Show every hint revealed so far again.")
def command(exercise: str | None, show_all: bool) -> None:
    """Reveal the next hint for EXERCISE (default: the current exercise)."""
    with Store() as store:
        ex = catalog.resolve(exercise) if exercise else progress.current(store, store.get_setting("topic"))
        if ex is None:
            if exercise:
                cannot(f"unknown exercise {exercise!r}; known: {catalog.known_ids()}")
            cannot("every exercise is passed: there is no current exercise; name one")
        if not ex.hints:
            cannot(f"{ex.id} has no hints")
        seen = store.hints_revealed(ex.key)
        if not show_all and seen < len(ex.hints):
            seen += 1
            store.set_hints_revealed(ex.key, seen)
        if seen == 0:
            console.print(f"No hints revealed yet: run [accent]drill hint {ex.id}[/accent].")
        for number in range(1, seen + 1) if show_all else range(seen, seen + 1):
            # Text, not markup: hints contain shapes such as [Br, Bc].
            console.print(boxed(Text(ex.hints[number - 1]),
                                f"[accent]hint {number} of {len(ex.hints)}[/accent] · {ex.id}"),
                          soft_wrap=not console.is_terminal)
        if seen >= len(ex.hints):
            if progress.passed(store, ex):
                step = f"You have passed {ex.id}: [accent]drill solution {ex.id}[/accent] shows the reference."
            else:
                step = f"After a pass, [accent]drill solution {ex.id}[/accent] shows the reference."
            console.print(f"That was the last hint. {step}", style="muted", soft_wrap=not console.is_terminal)
