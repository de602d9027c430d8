"""drill start TOPIC: lay out a workspace, show the intro and the first exercise."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
from rich.markdown import Markdown
from rich.text import Text

from drill import catalog, paths, progress, userfile
from drill.console import boxed, console
from drill.errors import cannot
from drill.store import Store
from drill.words import plural


def workspace_readme(topic: catalog.Topic) -> str:
    lines = [f"# {topic.title} drill", "", "Edit each file, then grade it:", "",
             f"    drill check {topic.exercises[0].file}", "",
             "Stuck? `drill hint`. Progress: `drill status`. Follow-up questions: `drill quiz --followups`.",
             "", "| # | file | exercise | needs |", "|---|---|---|---|"]
    for ex in topic.exercises:
        lines.append(f"| {ex.number} | `{ex.file}` | {ex.title} | {progress.needs_in_words(ex)} |")
    return "\n".join(lines) + "\n"


def lay_out(topic: catalog.Topic, target: Path) -> tuple[list[str], list[str]]:
    """Copy every stub into target; never overwrite a file the user changed. Returns (written, kept)."""
    target.mkdir(parents=True, exist_ok=True)
    written, kept = [], []
    files = {ex.file: ex.stub_path.read_text(encoding="utf-8") for ex in topic.exercises}
    files["README.md"] = workspace_readme(topic)
    for name, text in files.items():
        path = target / name
        if path.exists():
            if not userfile.holds(path, text.encode("utf-8")):  # never blocks on a FIFO or reads /dev/zero
                kept.append(name)
            continue
        path.write_text(text, encoding="utf-8")
        written.append(name)
    return written, kept


def default_target(topic: catalog.Topic) -> Path:
    """./TOPIC, or the current folder when it already is that topic's workspace."""
    here = Path.cwd()
    if any((here / ex.file).is_file() for ex in topic.exercises):
        return here
    return here / topic.name


def _warn_if_in_a_repository(target: Path, topic: str) -> None:
    """A workspace made by default inside a git checkout (often drill's own) ends up in that
    project's `git status`: say where it went and the two commands that move it."""
    root = paths.git_root(target.parent)
    if root is None:
        return
    what = "drill's own source checkout" if paths.is_drill_checkout(root) else "the git repository"
    elsewhere = Path.home() / f"drill-{topic}"
    n = 1
    while elsewhere.exists():  # mv into an existing folder would nest the workspace inside it
        n += 1
        elsewhere = Path.home() / f"drill-{topic}-{n}"
    old, new = shlex.quote(str(target)), shlex.quote(str(elsewhere))
    console.print(Text.assemble(
        ("Note: ", "warn"), f"this workspace is inside {what} at {root}. To keep your work apart from it, "
        f"move it (your edits come along; drill start only registers the new place):\n"
        f"  mv {old} {new} && drill start {topic} --dir {new}"), soft_wrap=True)


@click.command(name="start")
@click.argument("topic")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the workspace (default: ./TOPIC).")
def command(topic: str, directory: Path | None) -> None:
    """Lay out a workspace for TOPIC and show the intro and the first exercise."""
    if topic not in catalog.topic_names():
        cannot(f"unknown topic {topic!r}; known topics: {', '.join(catalog.topic_names())}")
    spec = catalog.load_topic(topic)
    target = (directory or default_target(spec)).resolve()
    if target.exists() and not target.is_dir():
        cannot(f"{target} exists and is not a directory")
    try:
        written, kept = lay_out(spec, target)
    except OSError as exc:
        cannot(f"could not write the workspace in {target}: {exc.strerror or exc}")
    with Store() as store:
        before = store.workspace(topic)
        store.set_workspace(topic, target)
        store.set_setting("topic", topic)
        following = progress.current(store, topic)

    console.print(boxed(Text(spec.intro.strip()), f"[accent]{spec.title}[/accent]"),
                  soft_wrap=not console.is_terminal)
    console.print(f"Workspace: [accent]{target}[/accent]", soft_wrap=True)
    if before is not None and before != target and any((before / ex.file).is_file() for ex in spec.exercises):
        console.print(Text.assemble(
            ("Note: ", "warn"), f"this is now the {topic} workspace: drill check, watch and reset look for a bare "
            f"file name here (after the folder you stand in), no longer in {before}. Your files there are "
            f"untouched; drill start {topic} --dir {shlex.quote(str(before))} switches back."), soft_wrap=True)
    if written:
        console.print(f"  wrote {plural(len(written), 'file')}: {', '.join(written)}", style="muted",
                      soft_wrap=True)
    for name in kept:
        console.print(f"  kept your edited [warn]{name}[/warn] (not overwritten)")
    if directory is None:
        _warn_if_in_a_repository(target, topic)
    if following is None:
        console.print(progress.all_passed_step(topic), soft_wrap=True)
        return
    label = "First exercise" if following == spec.exercises[0] else "Next exercise"
    console.print(Markdown(
        f"**{label}:** `{following.file}`: {following.title}.\n\n"
        f"Open it, replace the TODOs, then run `drill check {following.file}` inside the workspace."))
