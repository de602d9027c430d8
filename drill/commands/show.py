"""drill show: draw the algorithms in the terminal (tiling, online softmax, IO, ring).

The views are not listed here: each topic's catalog names its own ([[view]] entries),
and a view's command module is imported only when that view runs or its help is read.
"""

from __future__ import annotations

import importlib

import click

from drill import catalog

HELP = "Draw the algorithm in the terminal."


class ViewGroup(click.Group):
    """The `drill show` group, filled from the catalogs' views."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(catalog.all_views())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        view = catalog.all_views().get(name)
        if view is None:
            return None
        module, _, function = view.command.partition(":")
        return getattr(importlib.import_module(module), function)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The examples come from the catalogs, in their order, so a new view lists itself.
        examples = [view.example for view in catalog.all_views().values() if view.example]
        self.help = HELP + ("\n\n\b\n" + "\n".join(f"  {line}" for line in examples) if examples else "")
        super().format_help_text(ctx, formatter)


@click.group(name="show", cls=ViewGroup, invoke_without_command=True, help=HELP)
@click.pass_context
def command(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
