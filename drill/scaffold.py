"""`drill dev new TOPIC/ID`: the files of a new exercise, ready for its author to fill in.

Writes, under a source checkout: the stub and the solution (mirrored, one function), a
checks file with one working check, a catalog entry appended to the topic's catalog.toml
(the topic is created when it does not exist yet) and tests/planted/<topic>/<id>/ with one
planted wrong implementation. Right after scaffolding, `drill dev check TOPIC/ID` passes
every rule except the count of planted files: that is the author's next job.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from drill.catalog import CATALOG_FORMAT, parse_catalog
from drill.errors import DrillError

SLUG = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class NewExercise:
    root: Path  # the source checkout: exercises/, solutions/, tests/planted/
    topic: str
    id: str
    title: str
    number: str
    function: str

    @property
    def file(self) -> str:
        return f"{self.number}_{self.id.replace('-', '_')}.py"

    @property
    def key(self) -> str:
        return f"{self.topic}/{self.id}"


def plan(root: Path, key: str, title: str | None = None) -> NewExercise:
    """Check the name and pick the next free number in the topic."""
    topic, _, exercise_id = key.partition("/")
    if not (SLUG.match(topic or "") and SLUG.match(exercise_id or "")):
        raise DrillError(f"{key!r}: name it TOPIC/ID in lowercase words joined by '-', "
                         "for example flashattention/paged-attention")
    if title is not None and ('"""' in title or "\n" in title or not title.strip()):
        raise DrillError("--title must be one line of text without triple quotes")
    if not (root / "exercises").is_dir() or not (root / "solutions").is_dir():
        raise DrillError(f"{root} is not drill's source checkout (no exercises/ and solutions/ in it)")
    catalog_path = root / "exercises" / topic / "catalog.toml"
    numbers = [0]
    if catalog_path.is_file():
        spec = parse_catalog(catalog_path.read_text(encoding="utf-8"), topic)
        if any(ex.id == exercise_id for ex in spec.exercises):
            raise DrillError(f"{key} is already in {catalog_path}")
        numbers += [int(ex.number) for ex in spec.exercises if ex.number.isdigit()]
    return NewExercise(root=root, topic=topic, id=exercise_id, number=f"{max(numbers) + 1:02d}",
                       title=title or exercise_id.replace("-", " ").capitalize(),
                       function=exercise_id.replace("-", "_"))


def write(new: NewExercise) -> list[Path]:
    """Write every file of the new exercise; returns the paths written (or appended to)."""
    exercises, solutions = new.root / "exercises" / new.topic, new.root / "solutions" / new.topic
    planted = new.root / "tests" / "planted" / new.topic / new.id
    checks = exercises / "checks" / f"test_{Path(new.file).stem}.py"
    targets = [exercises / new.file, solutions / new.file, checks, planted / "returns_input.py"]
    taken = [str(p) for p in targets if p.exists()]
    if taken:
        raise DrillError(f"not overwriting {', '.join(taken)}")
    written = _new_topic(new) if not (exercises / "catalog.toml").is_file() else []
    for folder in (planted, checks.parent, solutions):
        folder.mkdir(parents=True, exist_ok=True)
    files = {targets[0]: _stub(new), targets[1]: _solution(new), checks: _checks(new), targets[3]: _planted(new)}
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    with open(exercises / "catalog.toml", "a", encoding="utf-8") as catalog_file:
        catalog_file.write(_catalog_entry(new))
    return written + list(files) + [exercises / "catalog.toml"]


def _new_topic(new: NewExercise) -> list[Path]:
    """A topic's package folders and its catalog header (the checks' fixtures come from the grader)."""
    exercises, solutions = new.root / "exercises" / new.topic, new.root / "solutions" / new.topic
    (exercises / "checks").mkdir(parents=True, exist_ok=True)
    solutions.mkdir(parents=True, exist_ok=True)
    files = {
        exercises / "__init__.py": "",
        exercises / "checks" / "__init__.py": "",
        solutions / "__init__.py": "",
        exercises / "catalog.toml": (f'format = {CATALOG_FORMAT}\ntopic = "{new.topic}"\n'
                                     f'title = "{new.topic.replace("-", " ").title()}"\n'
                                     'intro = """\nWhat this topic teaches and why it matters in an interview.\n"""\n'),
    }
    for path, text in files.items():
        if not path.exists():
            path.write_text(text, encoding="utf-8")
    return list(files)


def _docstring(new: NewExercise) -> str:
    return (f'# drill: {new.key}\n"""{new.title}.\n\n'
            f"Say what {new.function} computes, the shapes it takes and returns, and its edge cases.\n\n"
            f'Check your work:  drill check {new.file}\n"""\n\nimport numpy as np\n\n\n')


def _stub(new: NewExercise) -> str:
    return _docstring(new) + (
        f"def {new.function}(x):\n"
        f'    """Twice x, as float64 (replace with the real contract)."""\n'
        "    # TODO: compute the result.\n"
        "    raise NotImplementedError\n")


def _solution(new: NewExercise) -> str:
    return _docstring(new) + (
        f"def {new.function}(x):\n"
        f'    """Twice x, as float64 (replace with the real contract)."""\n'
        "    # float64 so the check's tolerance means the same for every input dtype.\n"
        "    return np.asarray(x, dtype=np.float64) * 2.0\n")


def _checks(new: NewExercise) -> str:
    return f'''"""Hidden checks for {new.file}."""

import pytest

from drill.grader.expect import Call, array, close


@pytest.mark.parametrize("n", [1, 7, 64], ids=lambda n: f"n={{n}}")
def test_{new.function}_matches_the_reference(sub, rng, n):
    """{new.function} matches the reference on random inputs"""
    x = rng.normal(size=n)
    call = Call("{new.function}", f"x[{{n}}]")
    got = array(sub.{new.function}(x), call, shape=(n,))
    close(got, 2.0 * x, call, atol=1e-12, hint="name the likely mistake here")
'''


def _planted(new: NewExercise) -> str:
    return (f"# drill: {new.key}\n"
            "# planted: returns its input unchanged\n"
            f"# expect-fail: {new.function} matches the reference on random inputs\n"
            '"""Planted mistake: returns its input unchanged."""\n\n'
            "import numpy as np\n\n\n"
            f"def {new.function}(x):\n"
            "    return np.asarray(x, dtype=np.float64)\n")


def _catalog_entry(new: NewExercise) -> str:
    return (f'\n[[exercise]]\nid = "{new.id}"\nfile = "{new.file}"\ntitle = {json.dumps(new.title, ensure_ascii=False)}\n'
            f'needs = "cpu"\nfunctions = ["{new.function}"]\ntimeout = 30\nhints = [\n'
            '    "The first hint: where to start.",\n'
            '    "The second hint: the step people get wrong.",\n]\n')
