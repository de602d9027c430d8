"""One way to stop: a DrillError from anywhere becomes one line (or the --json document) and exit 2."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from drill import cli as cli_module
from drill import exitcodes
from drill.catalog import CatalogError
from drill.cards import DeckError
from drill.errors import DrillError, cannot
from drill.options import json_option
from drill.store import StoreError


def invoke(command: click.Command, *args: str):
    """Run `command` as a subcommand of drill's real group."""
    group = cli_module.LazyGroup(name="drill")
    group.get_command = lambda ctx, name: command if name == "_probe" else None
    return CliRunner().invoke(group, ["_probe", *args], catch_exceptions=False)


def stopping_with(error: Exception) -> click.Command:
    @click.command()
    @json_option("json", error_document=lambda reason, given: {"status": "error", "why": reason,
                                                                "file": given.get("file")})
    @click.argument("file", required=False)
    def probe(as_json: bool, file: str | None) -> None:
        raise error

    return probe


def test_a_drill_error_is_one_line_on_stderr_and_exit_2():
    result = invoke(stopping_with(DrillError("no such exercise")))
    assert result.exit_code == exitcodes.CANNOT
    assert result.stdout == ""
    assert result.stderr.strip() == "drill: no such exercise"


def test_with_json_the_same_error_is_the_commands_document_on_stdout():
    result = invoke(stopping_with(DrillError("no such exercise", file="x.py")), "--json")
    assert result.exit_code == exitcodes.CANNOT and result.stderr == ""
    assert json.loads(result.stdout) == {"status": "error", "why": "no such exercise", "file": "x.py"}


def test_the_json_document_sees_the_commands_own_arguments():
    result = invoke(stopping_with(DrillError("bad")), "given.py", "--json")
    assert json.loads(result.stdout)["file"] == "given.py"


def test_catalog_deck_and_store_errors_stop_the_same_way():
    for error in (CatalogError("catalog broken"), DeckError("deck broken"), StoreError("store broken")):
        result = invoke(stopping_with(error))
        assert result.exit_code == exitcodes.CANNOT, error
        assert result.stderr.strip() == f"drill: {error}"


def test_cannot_raises_a_drill_error_with_fields():
    try:
        cannot("why", target="f.py")
    except DrillError as exc:
        assert str(exc) == "why" and exc.fields == {"target": "f.py"}
    else:
        raise AssertionError("cannot() returned")


def test_check_json_error_document_names_the_file(tmp_path):
    result = CliRunner().invoke(cli_module.cli, ["check", str(tmp_path / "nowhere.py"), "--json"],
                                catch_exceptions=False)
    doc = json.loads(result.stdout)
    assert result.exit_code == exitcodes.CANNOT
    assert doc["status"] == "error" and doc["file"] == str(tmp_path / "nowhere.py") and doc["message"]


def test_no_command_prints_and_exits_on_its_own():
    # The idiom this replaced: a command printing the line itself and raising SystemExit(2).
    from pathlib import Path

    for path in (Path(cli_module.__file__).parent / "commands").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "fail_line" not in text and "SystemExit(exitcodes.CANNOT)" not in text, path.name


def test_autotune_under_the_interpreter_is_explained():
    from drill.grader.recorder import explain_user_error

    line = explain_user_error({"type": "RuntimeError", "message": "0 active drivers ([]). There should only be one.",
                               "line": 103}, 2048)
    assert line.startswith("your code raised RuntimeError: 0 active drivers") and "(your file, line 103)" in line
    assert "triton.autotune cannot time its configs" in line
