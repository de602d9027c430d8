"""Read a numeric card answer the way a person writes it, without eval.

'≈ 1.135', 'e^-2+1', '2^24', '1/9', '3.2e5', '3.2 × 10^5', '10 ln 2', '16,777,216',
'228 KB': the whole text must be one number or one arithmetic expression (a
trailing unit is dropped). Two numbers that do not form an expression ('1.13
or 1.14') are refused, so the quiz asks again instead of grading the first one.
The expression is parsed with `ast` and walked over a whitelist: numbers, + - * / ^,
parentheses, the constants e and pi and a few one-argument functions.
"""

from __future__ import annotations

import ast
import math
import operator
import re

MAX_LENGTH = 120
MAX_EXPONENT = 400  # 10^400 overflows a float anyway; refuse before computing

_FUNCTIONS = {"exp": math.exp, "ln": math.log, "log": math.log, "log2": math.log2,
              "log10": math.log10, "sqrt": math.sqrt, "log1p": math.log1p}
_CONSTANTS = {"e": math.e, "pi": math.pi, "π": math.pi}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}

_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_LEAD = re.compile(r"^\s*(≈|~|=|about|approx\.?|approximately|around|roughly|约|大约)\s*", re.IGNORECASE)
# A unit at the end: letters, %, ×, / (KB, GFLOPs, TFLOP/s, rows, x, 倍, 个, 万…), never a constant.
_UNIT = re.compile(r"\s*([A-Za-z%×µ\u4e00-\u9fff]+(?:/[A-Za-z]+)?)\s*$")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d.])")
_TIMES = re.compile(r"(?<=[\d)\s])\s*[x×·]\s*(?=[\d(])")
_BARE_CALL = re.compile(r"\b(ln|log2|log10|log1p|log|exp|sqrt)\s+(\d+(?:\.\d+)?)")
_IMPLICIT = re.compile(r"(\d)\s*(?=(ln|log|exp|sqrt|pi|π)\b|\()")


class NotANumber(ValueError):
    """The text is not one number or expression."""


def evaluate(text: str) -> float:
    """The value of what the user typed; NotANumber when it is not one number or expression."""
    source = _prepare(text)
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise NotANumber(text) from exc
    try:
        value = _walk(tree.body)
    except (ArithmeticError, ValueError) as exc:
        raise NotANumber(text) from exc
    if not math.isfinite(value):
        raise NotANumber(text)
    return float(value)


def parse(text: str) -> float | None:
    try:
        return evaluate(text)
    except NotANumber:
        return None


def plain_decimal(text: str) -> str | None:
    """The number as written ('1.14' in '≈ 1.14 KB'), or None if the text is an expression."""
    try:
        source = _prepare(text).strip()
    except NotANumber:
        return None
    return source if re.fullmatch(r"[-+]?\d+(\.\d+)?", source) else None


def _prepare(text: str) -> str:
    if len(text) > MAX_LENGTH:
        raise NotANumber(text)
    s = text.strip().translate(str.maketrans({"−": "-", "–": "-", "，": ",", "（": "(", "）": ")"}))
    s = _LEAD.sub("", s)
    unit = _UNIT.search(s)
    if unit and unit.group(1).lower() not in _CONSTANTS and not s[: unit.start()].rstrip().endswith("^"):
        s = s[: unit.start()]
    s = re.sub(r"([⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+)", lambda m: "^(" + m.group(1).translate(_SUPERSCRIPT) + ")", s)
    s = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)
    s = _TIMES.sub("*", s)
    s = _BARE_CALL.sub(r"\1(\2)", s)
    s = _IMPLICIT.sub(r"\1*", s)
    s = s.replace("^", "**").replace("π", "pi").replace("{", "(").replace("}", ")")
    if not s.strip():
        raise NotANumber(text)
    return s


def _walk(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_walk(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError("exponent too large")
        return _BINARY[type(node.op)](left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and len(node.args) == 1 and not node.keywords):
        return _FUNCTIONS[node.func.id](_walk(node.args[0]))
    raise ValueError(f"not allowed: {type(node).__name__}")
