"""The shape of kernels/ and its errors, read from the source (no torch, no GPU needed).

- kernels/ holds the kernels, their shared helpers and a benchmarks/ folder; nothing else.
- The import graph of kernels/ has no cycle; a backend imports only the shared helpers, never the
  dispatcher or another backend; no file under kernels/ imports the grader (drill.grader).
- No `assert` statement in drill/ or kernels/: an argument check must survive `python -O` and
  reach the caller as a ValueError that names the argument.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
PACKAGE = "drill.kernels"
SHARED = {"common", "fastlaunch", "gluon_common"}
BACKENDS = {"triton_fa2", "gluon_fwd", "gluon_bwd", "fp8", "decode", "ring"}
DISPATCH = {"dispatch", "__init__"}


def module_name(path: Path) -> str:
    rel = path.relative_to(KERNELS).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PACKAGE, *parts])


def imports_of(path: Path, as_module: str | None = None) -> set[str]:
    """Every module `path` imports, anywhere in the file (function-level imports too), as absolute
    names; relative imports resolve as if the file were module `as_module` (default: its own)."""
    as_module = as_module or module_name(path)
    package = as_module if path.name == "__init__.py" else as_module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.split(".")
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            if node.module:  # `from . import x` imports module x, not the package for itself
                found.add(mod)
            found.update(f"{mod}.{alias.name}" for alias in node.names)
    return found


def kernel_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in KERNELS.rglob("*.py") if "__pycache__" not in p.parts}
    return {name: {m for m in imports_of(path) if m in files and m != name} for name, path in files.items()}


def test_kernels_folder_holds_kernels_helpers_and_benchmarks():
    top = {p.stem for p in KERNELS.glob("*.py")}
    want = SHARED | BACKENDS | DISPATCH
    assert top == want, f"modules at the top of kernels/ other than expected: {sorted(top ^ want)}"
    folders = {p.name for p in KERNELS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {"benchmarks"}, folders
    assert (KERNELS / "benchmarks" / "__init__.py").is_file()
    assert (KERNELS / "benchmarks" / "suite.py").is_file()  # the README's GPU command


def test_kernel_import_graph_has_no_cycle():
    graph = kernel_graph()
    done, stack = set(), []

    def visit(node):
        if node in stack:
            cycle = stack[stack.index(node):] + [node]
            pytest.fail("import cycle in kernels/: " + " -> ".join(cycle))
        if node in done:
            return
        stack.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        stack.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_backends_import_only_shared_helpers():
    graph = kernel_graph()
    shared = {f"{PACKAGE}.{m}" for m in SHARED}
    for name in BACKENDS | SHARED:
        deps = graph[f"{PACKAGE}.{name}"]
        assert deps <= shared, f"{name} imports {sorted(deps - shared)}: a backend may import only {sorted(SHARED)}"
    assert f"{PACKAGE}.dispatch" not in set().union(*(graph[f"{PACKAGE}.{n}"] for n in BACKENDS | SHARED))


def test_no_kernel_file_imports_the_grader():
    for path in KERNELS.rglob("*.py"):
        bad = sorted(m for m in imports_of(path) if m == "drill.grader" or m.startswith("drill.grader."))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_structure_checks_can_fail(tmp_path):
    """The reader above sees relative, function-level and `from . import` imports, and the assert
    finder sees an assert."""
    src = tmp_path / "x.py"
    src.write_text("from . import dispatch\n\ndef f(x):\n    from .common import LOG2E\n"
                   "    import drill.grader.proxy\n    assert x > 0\n")
    found = imports_of(src, "drill.kernels.x")
    assert {"drill.kernels.dispatch", "drill.kernels.common", "drill.grader.proxy"} <= found
    assert len(asserts_in(tmp_path, tmp_path)) == 1


def asserts_in(folder: Path, root: Path = ROOT) -> list[str]:
    out = []
    for path in folder.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Assert):
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


@pytest.mark.parametrize("folder", ["drill", "kernels"])
def test_no_assert_guards_an_argument(folder):
    """`assert` vanishes under python -O and raises AssertionError without naming the argument:
    checks in drill/ and kernels/ raise ValueError (or another named exception) instead."""
    found = asserts_in(ROOT / folder)
    assert not found, "assert statements (use a ValueError naming the argument): " + ", ".join(found)
