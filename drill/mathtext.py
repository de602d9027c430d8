"""Turn the TeX spans in card text into Unicode a terminal can show.

Cards write math as \\( ... \\) (inline) or \\[ ... \\] (display). flatlatex does the
conversion; it lacks the operator names and a few symbols our cards use, so they
are defined here. Text outside the spans is left exactly as written.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Commands flatlatex does not know, in its own \newcommand syntax.
EXTRA_COMMANDS = (
    # Operator and function names print upright, as plain words.
    *(rf"\newcommand\{name}{{{name}}}" for name in (
        "max", "min", "log", "exp", "ln", "lg", "sin", "cos", "tanh", "arg", "det", "dim")),
    r"\newcommand\operatorname[1]{#1}",
    r"\newcommand\mathrm[1]{#1}",
    r"\newcommand\text[1]{#1}",
    r"\newcommand\texttt[1]{#1}",
    r"\newcommand\mathrel[1]{#1}",
    r"\newcommand\textsf[1]{#1}",
    # T is transliterated to a superscript when it follows ^.
    r"\newcommand\top{T}",
    r"\newcommand\intercal{T}",
    r"\newcommand\lceil{⌈}",
    r"\newcommand\rceil{⌉}",
    r"\newcommand\lfloor{⌊}",
    r"\newcommand\rfloor{⌋}",
    r"\newcommand\lvert{|}",
    r"\newcommand\rvert{|}",
    r"\newcommand\vert{|}",
    r"\newcommand\langle{⟨}",
    r"\newcommand\rangle{⟩}",
    r"\newcommand\le{≤}",
    r"\newcommand\ge{≥}",
    r"\newcommand\ne{≠}",
    r"\newcommand\to{→}",
    r"\newcommand\gets{←}",
    r"\newcommand\ldots{…}",
    r"\newcommand\colon{:}",
    r"\newcommand\!{}",
    r"\newcommand\tfrac[2]{\frac{#1}{#2}}",
    r"\newcommand\dfrac[2]{\frac{#1}{#2}}",
)

# Single-character escapes; plain characters read better.
_ESCAPES = {r"\%": "%", r"\#": "#", r"\&": "&"}

SPAN = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
RAW_COMMAND = re.compile(r"\\[A-Za-z]+")
COMMAND_BEFORE_SPACE = re.compile(r"\\[A-Za-z]+(?= )")


@lru_cache(maxsize=1)
def _converter():
    import flatlatex  # imported on first use: keeps `drill --help` fast

    class Converter(flatlatex.converter):
        # flatlatex writes B_c as B[c] and log_2 as (log)₂ when a subscript has no
        # Unicode glyph or the base is a word; B_c and log₂ read better in a terminal.
        # (The parent calls these through their name-mangled names.)
        def _converter__indexed(self, base, sub):
            return base + _subscript(sub, flatlatex.data.subscript)

        def _converter__exponent(self, base, sup):
            if _visible_length(base) > 1 and not base.isalpha():
                base = f"({base})"
            table = flatlatex.data.superscript
            if sup and all(ch in table for ch in sup):
                return base + "".join(table[ch] for ch in sup)
            return base + "^" + (sup if _visible_length(sup) == 1 else f"({sup})")

    conv = Converter(keep_spaces=True)
    for definition in EXTRA_COMMANDS:
        conv.add_newcommand(definition)
    return conv


def _subscript(text: str, table: dict[str, str]) -> str:
    if text and all(ch in table for ch in text):
        return "".join(table[ch] for ch in text)
    return "_" + (text if text.isalnum() else f"({text})")


def _visible_length(text: str) -> int:
    return sum(1 for ch in text if not unicodedata.combining(ch))


@lru_cache(maxsize=1)
def _zero_arg_commands() -> frozenset[str]:
    from flatlatex import data

    extra = {d.split("{")[0].removeprefix("\\newcommand") for d in EXTRA_COMMANDS if "[" not in d}
    # Opening delimiters hug what follows (⌈x⌉, not ⌈ x⌉), so their space is dropped.
    opening = {r"\lceil", r"\lfloor", r"\langle", r"\lvert"}
    return (frozenset(data.symbols) | frozenset(extra)) - opening


def _keep_space_after_commands(tex: str) -> str:
    # TeX swallows the space after a command (a \ll b reads a ≪b); an empty group
    # after a command that takes no argument keeps the space the author wrote.
    zero_arg = _zero_arg_commands()
    return COMMAND_BEFORE_SPACE.sub(
        lambda m: m.group(0) + "{}" if m.group(0) in zero_arg else m.group(0), tex
    )


def tex_to_unicode(tex: str) -> str:
    """One TeX math expression to Unicode; the source is returned if it cannot be parsed."""
    for escape, char in _ESCAPES.items():
        tex = tex.replace(escape, char)
    try:
        return _converter().convert(_keep_space_after_commands(tex.strip()))
    except Exception:  # flatlatex raises bare Exceptions on some malformed input
        return tex


def render(text: str) -> str:
    """Replace every \\( \\) and \\[ \\] span in text by its Unicode rendering."""
    return SPAN.sub(lambda match: tex_to_unicode(match.group(1) or match.group(2)), text)


def raw_commands(text: str) -> list[str]:
    """TeX commands that survive rendering (a deck lint: there should be none)."""
    return RAW_COMMAND.findall(render(text))
