"""Mutants of a Python file: the classic FlashAttention mistakes, made in the learner's own code.

Each operator looks at one AST node and proposes replacements (a new node, or None to
delete a statement). A mutant is the file with only that node's text rewritten
(`ast.unparse` of the replacement), so its diff against the file is one small hunk and the
learner's comments and layout stay. Every mutant is parsed back and compared with the
mutated tree; one whose text would not mean that tree (a precedence surprise) is retried
in parentheses, then dropped.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import re
from dataclasses import dataclass
from typing import Callable, Iterator

DELETE = None  # a replacement of None removes the statement

REDUCTIONS = {"sum", "max", "min", "mean", "amax", "amin", "prod", "argmax", "argmin", "logsumexp",
              "std", "var", "any", "all", "nansum", "nanmax", "nanmin"}
BASES = {"exp": "exp2", "exp2": "exp", "log": "log2", "log2": "log"}
SHIFTED = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
ORDERED = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.MatMult, ast.Pow)


@dataclass(frozen=True)
class Mutant:
    id: str  # operator and a hash of the normalised change: stable while the line is unchanged
    operator: str
    title: str  # what the operator does, in words
    line: int
    before: str  # the code that changed, as written
    after: str  # what it became ("" for a deleted statement)
    source: str  # the whole mutated file
    diff: str  # unified diff against the file

    @property
    def change(self) -> str:
        return f"{self.before}  →  {self.after or '(deleted)'}"


@dataclass
class Context:
    """What an operator may need to know beyond its node."""

    numpy: str | None  # the name numpy is imported as, if it is
    rebound: set[int]  # ids of statements that assign a name already bound in their function
    parents: dict  # node -> (parent, field, index)

    def minus_inf(self) -> ast.expr:
        if self.numpy:
            return ast.UnaryOp(ast.USub(), ast.Attribute(ast.Name(self.numpy, ast.Load()), "inf", ast.Load()))
        return ast.Call(ast.Name("float", ast.Load()), [ast.Constant("-inf")], [])


Proposal = Iterator[tuple["ast.AST | None", str]]  # (replacement, what it does)


# -- predicates ---------------------------------------------------------------

def _name(node: ast.AST) -> str:
    """The last dotted part of a name or attribute ('' otherwise)."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _is_scale(node: ast.AST) -> bool:
    """A softmax scale: a variable called *scale*, or anything holding a square root."""
    if "scale" in _name(node).lower():
        return True
    return any(isinstance(n, ast.Call) and _name(n.func) in ("sqrt", "rsqrt") for n in ast.walk(node))


def _is_minus_inf(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if _name(inner) == "inf":
            return True
        return _is_float_call(inner, "inf")
    return _is_float_call(node, "-inf") or _name(node) == "NINF"


def _is_float_call(node: ast.AST, text: str) -> bool:
    return (isinstance(node, ast.Call) and _name(node.func) == "float" and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).lower() == text)


def _is_zero(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 0)


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


# -- operators ----------------------------------------------------------------

def drop_factor(node: ast.AST, ctx: Context) -> Proposal:
    """`alpha * l` → `l`: a factor of a product left out (the missing rescale)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) \
            and not (_is_scale(node.left) or _is_scale(node.right)):
        for kept, dropped in ((node.right, node.left), (node.left, node.right)):
            if not isinstance(kept, ast.Constant):
                yield kept, f"drops the factor {ast.unparse(dropped)}"


def drop_scale(node: ast.AST, ctx: Context) -> Proposal:
    """`S * scale` → `S`, `x / sqrt(d)` → `x`: the softmax scale removed."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        if _is_scale(node.right):
            yield node.left, f"removes the scale {ast.unparse(node.right)}"
        elif isinstance(node.op, ast.Mult) and _is_scale(node.left):
            yield node.right, f"removes the scale {ast.unparse(node.left)}"


def exp_base(node: ast.AST, ctx: Context) -> Proposal:
    """`exp` ↔ `exp2`, `log` ↔ `log2`: the wrong base."""
    if isinstance(node, ast.Call) and _name(node.func) in BASES:
        func = copy.copy(node.func)
        if isinstance(func, ast.Name):
            func.id = BASES[func.id]
        else:
            func.attr = BASES[func.attr]
        yield ast.Call(func, node.args, node.keywords), f"uses {BASES[_name(node.func)]} instead of {_name(node.func)}"


def shift_comparison(node: ast.AST, ctx: Context) -> Proposal:
    """`<=` → `<` and the like: a comparison off by one (the causal mask's diagonal)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in SHIFTED:
                ops = list(node.ops)
                ops[i] = SHIFTED[type(op)]()
                yield ast.Compare(node.left, ops, node.comparators), "moves the comparison's boundary by one"


def init_value(node: ast.AST, ctx: Context) -> Proposal:
    """`-inf` → `0`, `0` → `-inf`, `zeros` → `full(-inf)`: a running statistic started wrong."""
    if _is_minus_inf(node) and not isinstance(ctx.parents[node][0], ast.Compare):  # a test, not a start
        yield ast.Constant(0.0), "starts from 0 instead of -inf"
    elif isinstance(node, ast.Assign) and _is_zero(node.value):
        yield ast.copy_location(ast.Assign(node.targets, ctx.minus_inf()), node), "starts from -inf instead of 0"
    elif isinstance(node, ast.Call) and _name(node.func) in ("zeros", "zeros_like") and len(node.args) == 1 \
            and isinstance(node.func, ast.Attribute):
        func = ast.Attribute(node.func.value, "full" if node.func.attr == "zeros" else "full_like", ast.Load())
        yield ast.Call(func, [node.args[0], ctx.minus_inf()], node.keywords), "fills with -inf instead of 0"


def reduction_axis(node: ast.AST, ctx: Context) -> Proposal:
    """`axis=-1` → `axis=0`, `keepdims=True` dropped: a reduction over the wrong axis or shape."""
    if not (isinstance(node, ast.Call) and _name(node.func) in REDUCTIONS):
        return
    for i, kw in enumerate(node.keywords):
        axis = _int_value(kw.value)
        if kw.arg == "axis" and axis is not None:
            new = -1 if axis == 0 else 0
            keywords = node.keywords[:i] + [ast.keyword("axis", ast.Constant(new) if new >= 0 else
                                                         ast.UnaryOp(ast.USub(), ast.Constant(1)))] + node.keywords[i + 1:]
            yield ast.Call(node.func, node.args, keywords), f"reduces over axis {new} instead of {axis}"
        if kw.arg == "keepdims" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            yield ast.Call(node.func, node.args, node.keywords[:i] + node.keywords[i + 1:]), "drops keepdims"


def block_bound(node: ast.AST, ctx: Context) -> Proposal:
    """A range bound moved by one step (a block), a slice bound moved by one element."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" \
            and 1 <= len(node.args) <= 3 and not node.keywords:
        args = node.args
        step = args[2] if len(args) == 3 else ast.Constant(1)
        what = "a block" if len(args) == 3 else "one"
        stop_at = 0 if len(args) == 1 else 1
        moved = list(args)
        moved[stop_at] = ast.BinOp(args[stop_at], ast.Sub(), step)
        yield ast.Call(node.func, moved, []), f"stops the loop {what} early"
        if len(args) >= 2:
            moved = list(args)
            moved[0] = step if _is_zero(args[0]) else ast.BinOp(args[0], ast.Add(), step)
            yield ast.Call(node.func, moved, []), f"starts the loop {what} late"
    elif isinstance(node, ast.Slice) and node.step is None:
        if node.upper is not None:
            yield ast.Slice(node.lower, ast.BinOp(node.upper, ast.Sub(), ast.Constant(1)), None), \
                "ends the slice one element early"
        if node.lower is not None and not _is_zero(node.lower):
            yield ast.Slice(ast.BinOp(node.lower, ast.Add(), ast.Constant(1)), node.upper, None), \
                "starts the slice one element late"


def delete_statement(node: ast.AST, ctx: Context) -> Proposal:
    """`m = m_new` deleted: an update, an accumulation, a write or a guard left out."""
    if isinstance(node, ast.AugAssign):
        yield DELETE, "drops the update"
    elif isinstance(node, ast.Assign) and (id(node) in ctx.rebound or any(
            isinstance(t, (ast.Subscript, ast.Attribute)) for t in _targets(node))):
        yield DELETE, "drops the assignment"
    elif isinstance(node, ast.If) and not node.orelse:
        yield DELETE, "drops the guard"


def swap_operands(node: ast.AST, ctx: Context) -> Proposal:
    """`m - m_new` → `m_new - m`: two operands of an ordered operation swapped."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ORDERED) \
            and ast.dump(node.left) != ast.dump(node.right):
        yield ast.BinOp(node.right, node.op, node.left), "swaps the operands"


# name, what it does, function; the order is the order mutants are offered in
OPERATORS: list[tuple[str, str, Callable[[ast.AST, Context], Proposal]]] = [
    ("drop-factor", "drop a factor", drop_factor),
    ("exp-base", "exp ↔ exp2, log ↔ log2", exp_base),
    ("shift-comparison", "shift a comparison", shift_comparison),
    ("init-value", "change an initial value", init_value),
    ("drop-scale", "remove the scale", drop_scale),
    ("reduction-axis", "change a reduction", reduction_axis),
    ("block-bound", "move a loop or slice bound", block_bound),
    ("delete-statement", "delete a statement", delete_statement),
    ("swap-operands", "swap two operands", swap_operands),
]


# -- the engine ---------------------------------------------------------------

def mutants(source: str, operators: list[str] | None = None) -> list[Mutant]:
    """Every mutant of `source` (file order within each operator, operators in OPERATORS order)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    ctx = Context(numpy=_numpy_alias(tree), rebound=_rebound(tree), parents=parents)
    raw = source.encode("utf-8")
    starts = _line_starts(raw)
    # File order; docstrings are left alone.
    nodes = sorted((n for n in ast.walk(tree) if hasattr(n, "lineno") and not _is_docstring(n)),
                   key=lambda n: (n.lineno, n.col_offset))
    found: list[Mutant] = []
    seen_sources = {source}
    for name, title, operator in OPERATORS:
        if operators is not None and name not in operators:
            continue
        for node in nodes:
            for replacement, _what in operator(node, ctx):
                text = _splice(raw, starts, tree, parents, node, replacement)
                if text is None or text in seen_sources:
                    continue
                seen_sources.add(text)
                found.append(_make(name, title, node, replacement, source, text, found))
    return found


def spread(found: list[Mutant], limit: int | None) -> list[Mutant]:
    """Up to `limit` mutants, taken in turn from each operator so every kind of mistake shows."""
    if limit is None or len(found) <= limit:
        return list(found)
    queues: dict[str, list[Mutant]] = {}
    for m in found:
        queues.setdefault(m.operator, []).append(m)
    chosen: list[Mutant] = []
    while len(chosen) < limit:
        for queue in queues.values():
            if queue and len(chosen) < limit:
                chosen.append(queue.pop(0))
    return chosen


def _make(operator: str, title: str, node: ast.AST, replacement, source: str, text: str,
          earlier: list[Mutant]) -> Mutant:
    before = ast.get_source_segment(source, node) or ""
    after = "" if replacement is None else ast.unparse(replacement)
    line = source.splitlines()[node.lineno - 1]
    key = "\n".join((operator, _normal(line), _normal(before), _normal(after)))
    mutant_id = f"{operator}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    taken = {m.id for m in earlier}
    base, n = mutant_id, 2
    while mutant_id in taken:  # the same change on two identical lines
        mutant_id, n = f"{base}-{n}", n + 1
    diff = "".join(difflib.unified_diff(source.splitlines(keepends=True), text.splitlines(keepends=True),
                                        "yours", "what if", n=2))
    return Mutant(mutant_id, operator, title, node.lineno, _first_line(before), _first_line(after), text, diff)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _splice(raw: bytes, starts: list[int], tree: ast.Module, parents: dict, node: ast.AST,
            replacement) -> str | None:
    """The file with `node`'s text replaced, or None when no text means exactly the mutated tree."""
    expected = _dump_replaced(tree, parents, node, replacement)
    begin = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    if replacement is DELETE or isinstance(replacement, ast.stmt):
        line_begin, line_end = starts[node.lineno - 1], _line_end(raw, end)
        if raw[line_begin:begin].strip() or raw[end:line_end].split(b"#")[0].strip():
            return None  # shares its line with other code (`a = 1; b = 2`): leave it
        if replacement is DELETE:
            # The only statement of a block becomes `pass`, so the block stays.
            alone = len(getattr(parents[node][0], parents[node][1])) == 1
            texts = [raw[:line_begin] + raw[line_begin:begin] + b"pass\n" + raw[line_end:]] if alone else \
                [raw[:line_begin] + raw[line_end:]]
        else:
            texts = [raw[:begin] + ast.unparse(replacement).encode() + raw[end:]]
    else:
        new = ast.unparse(replacement).encode()
        texts = [raw[:begin] + new + raw[end:], raw[:begin] + b"(" + new + b")" + raw[end:]]
    for text in texts:
        try:
            if ast.dump(ast.parse(text)) == expected:
                return text.decode("utf-8")
        except (SyntaxError, ValueError):
            continue
    return None


def _dump_replaced(tree: ast.Module, parents: dict, node: ast.AST, replacement) -> str:
    """ast.dump of the tree with `node` replaced (None: removed, or `pass` if it was alone)."""
    parent, field, index = parents[node]
    old = getattr(parent, field)
    if index is None:
        setattr(parent, field, replacement)
    else:
        new_list = list(old)
        if replacement is DELETE:
            new_list[index:index + 1] = [] if len(old) > 1 else [ast.Pass()]
        else:
            new_list[index] = replacement
        setattr(parent, field, new_list)
    try:
        return ast.dump(tree)
    finally:
        setattr(parent, field, old)


def _parents(tree: ast.AST) -> dict:
    """node -> (parent, field, index in the field's list or None)."""
    found = {}
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        found[child] = (parent, field, i)
            elif isinstance(value, ast.AST):
                found[value] = (parent, field, None)
    return found


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _line_starts(raw: bytes) -> list[int]:
    starts = [0]
    for i, byte in enumerate(raw):
        if byte == 0x0A:
            starts.append(i + 1)
    return starts


def _line_end(raw: bytes, pos: int) -> int:
    nl = raw.find(b"\n", pos)
    return len(raw) if nl < 0 else nl + 1


def _numpy_alias(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "numpy":
                    return alias.asname or "numpy"
    return None


def _targets(node: ast.Assign) -> Iterator[ast.AST]:
    for target in node.targets:
        yield from (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])


def _rebound(tree: ast.Module) -> set[int]:
    """Statements that assign a name the function had already bound (`m = m_new`, `l = l_new`)."""
    found = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound_at: dict[str, int] = {a.arg: fn.lineno for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        bindings = sorted(((n.lineno, n) for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.For))),
                          key=lambda pair: pair[0])
        for lineno, stmt in bindings:
            targets = list(_targets(stmt)) if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if isinstance(stmt, ast.Assign) and names and any(bound_at.get(n, lineno) < lineno for n in names):
                found.add(id(stmt))
            for n in names:
                bound_at.setdefault(n, lineno)
    return found
