"""One way for any part of drill to stop a command with a reason.

Raise `DrillError("why")` (or call `cannot("why")`) anywhere: the command group in
drill/cli.py turns it into one line on stderr (or the command's --json error
document) and exit code 2. Catalog, deck and store errors are DrillErrors too.
"""

from __future__ import annotations

from typing import NoReturn


class DrillError(Exception):
    """A command cannot do what was asked; the message is one plain sentence for the user.

    `fields` are extra values for the command's --json error document (for example the
    file that could not be graded), on top of the command's own arguments.
    """

    def __init__(self, message: str, **fields):
        super().__init__(message)
        self.fields = fields


def cannot(reason: str, **fields) -> NoReturn:
    raise DrillError(reason, **fields)
