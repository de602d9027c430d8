"""Load a topic's catalog.toml into frozen dataclasses.

The catalog is the single source of the exercise order, files, hints, the cards
tied to each exercise and the topic's `drill show` views. Unknown keys are rejected
so typos surface early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from drill import paths
from drill.errors import DrillError
from drill.tomlfile import tomllib

CATALOG_FORMAT = 1
NEEDS = ("cpu", "gpu", "dist")
HEADER = re.compile(r"^#\s*drill:\s*([a-z0-9_-]+)/([a-z0-9_-]+)\s*$")
VIEW_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
VIEW_COMMAND = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class CatalogError(DrillError):
    """The catalog file itself is malformed (an author error, not a user error)."""


@dataclass(frozen=True)
class Exercise:
    topic: str
    id: str
    file: str
    title: str
    needs: str
    functions: tuple[str, ...]
    hints: tuple[str, ...]
    cards: tuple[str, ...] = ()
    timeout: float = 60.0
    memory_mb: int = 2048

    @property
    def key(self) -> str:
        return f"{self.topic}/{self.id}"

    @property
    def number(self) -> str:
        return self.file.split("_", 1)[0]

    @property
    def stub_path(self) -> Path:
        return paths.exercises_root() / self.topic / self.file

    @property
    def solution_path(self) -> Path:
        return paths.solutions_root() / self.topic / self.file

    @property
    def checks_path(self) -> Path:
        return paths.exercises_root() / self.topic / "checks" / f"test_{Path(self.file).stem}.py"


@dataclass(frozen=True)
class View:
    """One `drill show NAME` picture: the click command that draws it, as 'module:function'
    (imported only when the view runs or its help is asked for), and the example line
    that `drill show --help` lists."""

    topic: str
    name: str
    command: str
    example: str


@dataclass(frozen=True)
class Topic:
    name: str
    title: str
    intro: str
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)
    views: tuple[View, ...] = field(default_factory=tuple)

    def get(self, exercise_id: str) -> Exercise | None:
        for ex in self.exercises:
            if exercise_id in (ex.id, ex.file, ex.number, Path(ex.file).stem) or (
                    exercise_id.isdigit() and exercise_id.zfill(2) == ex.number):
                return ex
        return None


_EXERCISE_KEYS = {"id", "file", "title", "needs", "functions", "hints", "cards", "timeout", "memory_mb"}
_VIEW_KEYS = {"name", "command", "example"}
_TOPIC_KEYS = {"format", "topic", "title", "intro", "exercise", "view"}


def topic_names() -> list[str]:
    root = paths.exercises_root()
    return sorted(p.parent.name for p in root.glob("*/catalog.toml"))


@lru_cache(maxsize=None)
def load_topic(name: str) -> Topic:
    path = paths.exercises_root() / name / "catalog.toml"
    if not path.is_file():
        raise KeyError(name)
    return parse_catalog(path.read_text(encoding="utf-8"), name)


def parse_catalog(text: str, name: str) -> Topic:
    data = tomllib.loads(text)
    _reject_unknown(data, _TOPIC_KEYS, f"catalog {name}")
    if data.get("format") != CATALOG_FORMAT:
        raise CatalogError(f"catalog {name}: format must be {CATALOG_FORMAT}")
    if data.get("topic") != name:
        raise CatalogError(f"catalog {name}: topic key says {data.get('topic')!r}")
    exercises = []
    for raw in data.get("exercise", []):
        _reject_unknown(raw, _EXERCISE_KEYS, f"catalog {name}, exercise {raw.get('id')}")
        if raw.get("needs", "cpu") not in NEEDS:
            raise CatalogError(f"exercise {raw.get('id')}: needs must be one of {NEEDS}")
        exercises.append(
            Exercise(
                topic=name,
                id=raw["id"],
                file=raw["file"],
                title=raw["title"],
                needs=raw.get("needs", "cpu"),
                functions=tuple(raw["functions"]),
                hints=tuple(raw.get("hints", ())),
                cards=tuple(raw.get("cards", ())),
                timeout=float(raw.get("timeout", 60.0)),
                memory_mb=int(raw.get("memory_mb", 2048)),
            )
        )
    ids = [ex.id for ex in exercises]
    if len(set(ids)) != len(ids):
        raise CatalogError(f"catalog {name}: duplicate exercise ids")
    views = tuple(_parse_view(raw, name) for raw in data.get("view", []))
    return Topic(name=name, title=data["title"], intro=data["intro"], exercises=tuple(exercises), views=views)


def _parse_view(raw: dict, topic: str) -> View:
    where = f"catalog {topic}, view {raw.get('name')}"
    _reject_unknown(raw, _VIEW_KEYS, where)
    if not VIEW_NAME.match(str(raw.get("name", ""))):
        raise CatalogError(f"{where}: name must be lower-case words joined by '-'")
    if not VIEW_COMMAND.match(str(raw.get("command", ""))):
        raise CatalogError(f"{where}: command must be 'module:function'")
    return View(topic=topic, name=raw["name"], command=raw["command"], example=str(raw.get("example", "")))


def _reject_unknown(table: dict, allowed: set[str], where: str) -> None:
    unknown = set(table) - allowed
    if unknown:
        raise CatalogError(f"{where}: unknown keys {sorted(unknown)}")


def all_exercises() -> list[Exercise]:
    return [ex for name in topic_names() for ex in load_topic(name).exercises]


def all_views() -> dict[str, View]:
    """Every topic's `drill show` views by name; one name belongs to one topic."""
    views: dict[str, View] = {}
    for name in topic_names():
        for view in load_topic(name).views:
            if view.name in views:
                raise CatalogError(f"drill show {view.name} is declared by both {views[view.name].topic} "
                                   f"and {view.topic}")
            views[view.name] = view
    return views


def resolve(name: str) -> Exercise | None:
    """An exercise from 'topic/id', 'id', 'NN', 'NN_name' or 'NN_name.py'."""
    if "/" in name:
        topic, _, rest = name.partition("/")
        if topic in topic_names():
            return load_topic(topic).get(rest)
        return None
    for topic in topic_names():
        found = load_topic(topic).get(name)
        if found:
            return found
    return None


def known_ids() -> str:
    return ", ".join(ex.id for ex in all_exercises())


def identify(path: Path) -> Exercise | None:
    """Find the exercise a file belongs to: its header line, else its file name."""
    from drill.userfile import head_lines

    for line in head_lines(path):
        match = HEADER.match(line.strip())
        if match:
            topic, exercise_id = match.groups()
            if topic in topic_names():
                found = load_topic(topic).get(exercise_id)
                if found:
                    return found
    for ex in all_exercises():
        if path.name == ex.file:
            return ex
    return None


def timeouts_in_words() -> str:
    """Each exercise's grading limit in words, the exercises that share a limit listed as
    ranges after it ('<limit> s for 01-05, 08-09, <limit> s for 06, ...').

    Read from the catalogs, so `drill check --help` can never disagree with them.
    """
    groups: dict[float, list[str]] = {}
    for ex in all_exercises():
        groups.setdefault(ex.timeout, []).append(ex.number)
    return ", ".join(f"{limit:g} s for {_number_ranges(numbers)}" for limit, numbers in sorted(groups.items()))


def _number_ranges(numbers: list[str]) -> str:
    """'01 02 03 05' -> '01-03, 05' (consecutive exercise numbers joined)."""
    runs: list[list[str]] = []
    for n in numbers:
        if runs and n.isdigit() and runs[-1][-1].isdigit() and int(n) == int(runs[-1][-1]) + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
