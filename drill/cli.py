"""The `drill` command group.

Commands live one per module under drill/commands and are imported only when
invoked, so `drill --help` never pays for numpy, torch or triton.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from drill import __version__, exitcodes

INTERRUPTED = 130  # the shell's code for Ctrl-C

# name -> (module, one-line help shown by `drill --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "start": ("drill.commands.start", "Lay out a workspace for a topic and show its intro."),
    "check": ("drill.commands.check", "Grade an exercise file against its hidden checks."),
    "hint": ("drill.commands.hint", "Reveal the next hint for an exercise."),
    "solution": ("drill.commands.solution", "Show the reference solution of an exercise."),
    "status": ("drill.commands.status", "Show progress on every exercise and the next step."),
    "list": ("drill.commands.list", "Every exercise at a glance: state and checks passed."),
    "reset": ("drill.commands.reset", "Put an exercise's stub back (your file is kept as a backup)."),
    "whatif": ("drill.commands.whatif", "What if this line of your passing file changed? Predict, then see."),
    "quiz": ("drill.commands.quiz", "Review follow-up question cards (spaced repetition)."),
    "mock": ("drill.commands.mock", "A timed mock interview question."),
    "export": ("drill.commands.export", "Export the follow-up cards (drill export anki FILE.apkg)."),
    "show": ("drill.commands.show", "Draw the algorithm in the terminal (tiling, online softmax, IO)."),
    "watch": ("drill.commands.watch", "Re-check a file every time it is saved."),
    "bench": ("drill.commands.bench", "Time the reference kernel against PyTorch SDPA (GPU)."),
    "dev": ("drill.commands.dev", "For exercise authors: run the author checks, scaffold an exercise."),
}


class LazyGroup(click.Group):
    """A click group that imports a command's module only when it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (module, _) in COMMANDS.items() if _module_exists(module)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _module_exists(COMMANDS[name][0]):
            return None
        return importlib.import_module(COMMANDS[name][0]).command

    def invoke(self, ctx: click.Context):
        # The one place a command stops with a reason (see drill/errors.py).
        import sqlite3

        from drill.errors import DrillError

        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # Ctrl-C: click would exit 1, which drill uses for "a check failed".
            click.echo("\ndrill: interrupted", err=True)
            raise SystemExit(INTERRUPTED) from None
        except DrillError as exc:
            stop(str(exc), exc.fields, ctx.meta)
        except sqlite3.Error as exc:
            # A backstop for a statement the store did not wrap in a StoreError; still one line.
            stop(f"the progress database failed: {exc}", {}, ctx.meta)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The help lines come from COMMANDS, so listing them imports nothing.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def stop(reason: str, fields: dict, meta: dict) -> None:
    """Exit 2 with the reason: the command's --json error document on stdout when it was
    asked for one, otherwise one line on stderr."""
    from drill.options import JSON_ERROR

    if JSON_ERROR in meta:
        import json

        document, arguments = meta[JSON_ERROR]
        click.echo(json.dumps(document(reason, {**arguments, **fields})))
    else:
        from drill.console import fail_line

        fail_line(reason)
    raise SystemExit(exitcodes.CANNOT)


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="drill")
def cli() -> None:
    """Practise ML-systems interview questions by writing real code.

    \b
      drill start flashattention        # workspace, intro, first exercise
      drill check 01_online_softmax.py  # grade a file against hidden checks
      drill quiz --followups            # review follow-up questions
    """


def main() -> None:
    cli(prog_name="drill")
