"""drill dev: commands for people who write exercises (author checks, scaffolding)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.markup import escape

from drill import catalog, exitcodes, paths
from drill.console import console
from drill.errors import cannot


@click.group(name="dev")
def command() -> None:
    """Commands for exercise authors: `dev check`, `dev mutants` and `dev new`."""


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


@command.command(name="mutants")
@click.argument("target", metavar="EXERCISE")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: the score and survivors per file.")
@click.option("--variants/--no-variants", default=True, show_default=True,
              help="Also score the honest variants (tests/variants/<topic>/<id>/*.py).")
@click.option("--jobs", type=click.IntRange(1, 16), default=None, help="Mutants graded at once (default 2).")
def mutants(target: str, as_json: bool, variants: bool, jobs: int | None) -> None:
    """The mutation score of EXERCISE's hidden checks: every what-if mutant of the reference
    solution (and of each honest variant) graded; killed / non-equivalent, and the survivors.

    A survivor that is not equivalent (its values differ from the file's on some call) is a
    gap in the checks: strengthen a check, or say why the gap is acceptable.
    Exit code 0: every file scores 90 % or more; 1: some file scores less; 2: unknown exercise.
    """
    import json

    from drill import whatif

    ex = catalog.resolve(target)
    if ex is None:
        cannot(f"unknown exercise {target!r}")
    if ex.needs != "cpu":
        cannot(f"mutation scores cover the NumPy exercises; {ex.id} runs {ex.needs} code")
    files = [("solution", ex.solution_path)]
    corpus = paths.exercises_root().resolve().parent / "tests" / "variants" / ex.topic / ex.id
    if variants and corpus.is_dir():
        files += [(p.stem, p) for p in sorted(corpus.glob("*.py"))]
    scores = []
    for label, path in files:
        if as_json:
            scores.append(whatif.score_file(ex, label, path, jobs=jobs or whatif.JOBS))
            continue
        with console.status(f"grading the mutants of {label} ...", spinner="dots") as status:
            def progress(done: int, total: int, label=label) -> None:
                status.update(f"grading the mutants of {label}: {done}/{total}")
            scores.append(whatif.score_file(ex, label, path, jobs=jobs or whatif.JOBS, on_outcome=progress))
    low = [s for s in scores if s.score < MUTATION_SCORE_FLOOR]
    if as_json:
        click.echo(json.dumps({"schema": 1, "exercise": ex.key, "floor": MUTATION_SCORE_FLOOR,
                               "files": [s.to_json() for s in scores]}))
    else:
        for s in scores:
            mark = "[fail]✗[/fail]" if s in low else "[pass]✓[/pass]"
            console.print(f"{mark} {escape(s.label)}: {s.score:.0%} ({s.killed} killed of {len(s.graded)} mutants, "
                          f"{s.equivalent} equivalent; {s.seconds:.0f} s)", soft_wrap=True)
            for m, o in s.survivors:
                kind = "gap" if o.equivalent is False else "not compared"
                console.print(f"    survivor ({kind}) line {m.line}: {escape(m.change)}", soft_wrap=True)
                if o.evidence:
                    console.print(f"      [muted]{escape(o.evidence)}[/muted]", soft_wrap=True)
    raise SystemExit(exitcodes.FAILED if low else exitcodes.OK)


MUTATION_SCORE_FLOOR = 0.9
