"""Options that several commands share."""

from __future__ import annotations

from typing import Callable

import click

# Where a command's --json error document builder waits in click's shared ctx.meta for
# cli.py, which turns a DrillError into output.
JSON_ERROR = "drill.json_error"

ErrorDocument = Callable[[str, dict], dict]


def json_option(help: str, error_document: ErrorDocument | None = None):
    """--json. With error_document(reason, arguments), a DrillError prints that document on
    stdout instead of the line on stderr, so a --json caller always gets JSON."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value and error_document is not None:
            # ctx.params is the same dict click fills in with the other arguments.
            ctx.meta[JSON_ERROR] = (error_document, ctx.params)
        return value

    return click.option("--json", "as_json", is_flag=True, help=help, callback=remember)
