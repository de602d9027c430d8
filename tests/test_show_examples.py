"""Every `drill show` command the project documents runs: the README, the catalogs (examples,
hints, intros), `drill show --help` and each view's own --help, and the suggestions the
views and other commands print. A documented example that exits non-zero is a defect."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import catalog
from drill.cli import cli

ROOT = Path(__file__).resolve().parents[1]
# A command runs from "drill show" to the end of the line, a comment, a closing quote or backtick.
_COMMAND = re.compile(r"drill show(?: +[A-Za-z0-9_.,:=+\-]+)+")


def _commands_in(text: str) -> set[str]:
    found = set()
    for match in _COMMAND.finditer(text):
        words = [word for word in match.group(0).split() if word.strip("-")]  # code banners: "# -- drill show io ---"
        if len(words) >= 3 and not words[2].startswith(("NAME", "COMMAND", "-h", "--help")) and words[2] != "must":
            found.add(" ".join(words))
    return found


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, ["show", *args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def documented() -> dict[str, set[str]]:
    """Each documented command with where it is written."""
    views = catalog.all_views()
    sources = {
        "README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
        "drill show --help": _help(),
        **{f"drill show {name} --help": _help(name) for name in views},
    }
    for path in sorted((ROOT / "exercises").glob("*/catalog.toml")):
        sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "drill").rglob("*.py")):
        sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    where: dict[str, set[str]] = {}
    for source, text in sources.items():
        for command in _commands_in(text):
            if command.split()[2] in views:  # "drill show io", not prose such as "drill show draws"
                where.setdefault(command, set()).add(source)
    return where


DOCUMENTED = documented()


def test_the_documented_commands_come_from_every_kind_of_source():
    sources = {source for places in DOCUMENTED.values() for source in places}
    assert "README.md" in sources and "drill show --help" in sources
    assert any(s.endswith("catalog.toml") for s in sources)
    assert any(s.startswith("drill show online-softmax --help") for s in sources)  # a view's own help
    assert any(s.startswith("drill/") for s in sources)  # a suggestion the code prints
    views = set(catalog.all_views())
    assert views <= {command.split()[2] for command in DOCUMENTED}, "every view has a documented example"


@pytest.mark.parametrize("command", sorted(DOCUMENTED), ids=lambda c: c[len("drill show "):])
def test_every_documented_show_command_runs(command):
    result = CliRunner().invoke(cli, shlex.split(command)[1:], terminal_width=100)
    assert result.exit_code == 0, (command, sorted(DOCUMENTED[command]), result.output[-400:])
    assert "Traceback" not in result.output and result.output.strip()
