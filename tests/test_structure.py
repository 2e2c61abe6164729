"""The package's shape: no import loops between its modules and no function over 60 lines.

Both are read from the source (every ``import`` statement counts, also those under
``TYPE_CHECKING`` and inside functions), so a loop hidden from the interpreter still fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpflow_svi_gplvm"
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imported_modules(name: str, path: Path) -> set[str]:
    """The package's modules that module ``name`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from package import module`` imports the module; any other name, its owner.
            named = [f"{base}.{alias.name}" for alias in node.names]
            targets = [target for target in named if target in MODULES]
            if len(targets) < len(named):
                targets.append(base)
        else:
            continue
        found.update(target for target in targets if target in MODULES and target != name)
    return found


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A chain of imports from ``start`` back to itself, if there is one."""
    stack, seen = [(start, [start])], set()
    while stack:
        module, chain = stack.pop()
        for imported in graph[module]:
            if imported == start:
                return chain + [start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, chain + [imported]))
    return None


def test_modules_are_found():
    assert {"gpflow_svi_gplvm", "gpflow_svi_gplvm.models", "gpflow_svi_gplvm.inference"} <= set(
        MODULES
    )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_loop(name):
    graph = {module: _imported_modules(module, path) for module, path in MODULES.items()}
    # A package's __init__ re-exports its modules; a module importing its own package's
    # __init__ would close a loop, which the graph keeps.
    cycle = _cycle_from(name, graph)
    assert cycle is None, "import loop: " + " -> ".join(cycle or [])


def test_loop_finder_sees_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle_from("a", graph) == ["a", "b", "c", "a"]
    assert _cycle_from("d", graph) is None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_functions_are_short(name):
    tree = ast.parse(MODULES[name].read_text())
    long = [
        f"{node.name} (line {node.lineno}, {node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{name}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def test_the_readme_layout_names_every_module():
    """README's Layout section names each module (those of a sub-package under its folder)."""
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    unnamed = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__init__.py"
        and not (
            re.search(rf"(?<![\w/]){re.escape(path.name)}\b", layout)
            and (path.parent == PACKAGE or f"{path.parent.name}/" in layout)
        )
    ]
    assert not unnamed, f"README's Layout section does not name: {', '.join(unnamed)}"
