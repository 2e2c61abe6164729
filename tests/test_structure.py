"""The package's shape: no import loops between its modules, no module over 500 lines, no class
over 300 and no function over 50; and
the tests' own: every test checks something.

All are read from the source (every ``import`` statement counts, also those under
``TYPE_CHECKING`` and inside functions), so a loop hidden from the interpreter still fails here.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpflow_svi_gplvm"
TESTS = Path(__file__).resolve().parent
MAX_FUNCTION_LINES = 50
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 500


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
    assert {
        "gpflow_svi_gplvm",
        "gpflow_svi_gplvm.models",
        "gpflow_svi_gplvm.prediction.latent_inference",
    } <= set(MODULES)


@cache
def _import_graph() -> dict[str, set[str]]:
    """Each module's imports of the package's modules, read once for all the tests below."""
    return {module: _imported_modules(module, path) for module, path in MODULES.items()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_loop(name):
    # A package's __init__ re-exports its modules; a module importing its own package's
    # __init__ would close a loop, which the graph keeps.
    cycle = _cycle_from(name, _import_graph())
    assert cycle is None, "import loop: " + " -> ".join(cycle or [])


def test_loop_finder_sees_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle_from("a", graph) == ["a", "b", "c", "a"]
    assert _cycle_from("d", graph) is None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_classes_and_functions_are_short(name):
    text = MODULES[name].read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{name}: over {MAX_MODULE_LINES} lines"
    for kinds, most in (
        ((ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES),
        ((ast.ClassDef,), MAX_CLASS_LINES),
    ):
        long = [
            f"{node.name} (line {node.lineno}, {node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, kinds) and node.end_lineno - node.lineno + 1 > most
        ]
        assert not long, f"{name}: over {most} lines: {', '.join(long)}"


# --------------------------------------------------------------------------------------------
# The single-cell wing: rooms (its sub-packages) on at most five floors, names of its own

WING = "gpflow_svi_gplvm.singlecell"
MAX_WING_FLOORS = 5


def _room(module: str) -> str:
    """The part of the wing ``module`` belongs to: its room, or the wing's top (``__init__``
    and the face) for the wing's own modules."""
    rooms = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    room = ".".join(module.split(".")[:3])
    return room if room in rooms and room != WING else WING


def _room_graph() -> dict[str, set[str]]:
    """Each part of the wing and the parts its modules import (itself left out)."""
    graph: dict[str, set[str]] = {}
    for module, imported in _import_graph().items():
        if module == WING or module.startswith(WING + "."):
            inside = {_room(target) for target in imported if target.startswith(WING + ".")}
            graph.setdefault(_room(module), set()).update(inside - {_room(module)})
    return graph


def _floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's floor in an acyclic ``graph``: 1 if it imports nothing, else one above the
    highest it imports."""
    floors: dict[str, int] = {}

    def floor(node: str) -> int:
        if node not in floors:
            floors[node] = 1 + max((floor(below) for below in graph.get(node, ())), default=0)
        return floors[node]

    for node in graph:
        floor(node)
    return floors


def test_the_single_cell_wing_has_rooms_on_few_floors():
    """No circle between rooms, at most five floors, and no room imports the wing's top: the
    face stands on the rooms, never the other way round."""
    graph = _room_graph()
    assert {f"{WING}.cells", f"{WING}.fitting", f"{WING}.genes"} <= set(graph)
    for room in graph:
        cycle = _cycle_from(room, graph)
        assert cycle is None, "rooms import in a circle: " + " -> ".join(cycle or [])
    floors = _floors(graph)
    assert max(floors.values()) <= MAX_WING_FLOORS, f"the wing's floors: {floors}"
    up = sorted(room for room, imported in graph.items() if room != WING and WING in imported)
    assert not up, f"rooms that import the wing's top (__init__ or face): {up}"


def test_the_floor_finder_counts_floors():
    assert _floors({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == {"a": 3, "b": 2, "c": 1}


def test_the_single_cell_wing_names_are_its_own():
    """No module or room of the wing is named as a module or package elsewhere in the package
    (``singlecell/model.py`` beside ``plotting/model.py`` read as one)."""

    def names(modules) -> set[str]:
        return {module.rsplit(".", 1)[-1] for module in modules}

    wing = [module for module in MODULES if module.startswith(WING + ".")]
    others = [module for module in MODULES if module != WING and module not in wing]
    shared = names(wing) & names(others)
    assert not shared, f"singlecell modules named as others elsewhere: {sorted(shared)}"


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


# --------------------------------------------------------------------------------------------
# Every test checks something

# Calls that check: ``assert`` statements aside, any ``assert*`` (numpy.testing, mocks, helpers
# named so) and pytest's raises, warns and fail.
CHECKING_CALLS = ("raises", "warns", "fail", "deprecated_call")
# Tests whose check is a call the reader cannot see into, and why it checks.
CHECKS_ELSEWHERE = {
    "test_scikit_learn_estimator_checks": "each scikit-learn estimator check asserts",
}


def _called_name(call: ast.Call) -> str | None:
    function = call.func
    if isinstance(function, ast.Name):
        return function.id
    return function.attr if isinstance(function, ast.Attribute) else None


def _checks_and_calls(function: ast.AST) -> tuple[bool, set[str]]:
    """Whether ``function`` checks by itself, and the names of the functions it calls."""
    calls = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            return True, calls
        if isinstance(node, ast.Call) and (name := _called_name(node)):
            if name.startswith("assert") or name in CHECKING_CALLS:
                return True, calls
            calls.add(name)
    return False, calls


def _functions(path: Path) -> dict[str, ast.AST]:
    tree = ast.parse(path.read_text())
    return {
        node.name: node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _tests_without_a_check(path: Path, shared: dict[str, ast.AST]) -> list[str]:
    """The ``test_*`` functions of ``path`` that neither check nor call (through any chain of
    the file's own functions and the helper modules' ``shared`` ones) a function that checks."""
    functions = {**shared, **_functions(path)}
    found = {name: _checks_and_calls(node) for name, node in functions.items()}
    checking = {name for name, (checks, _) in found.items() if checks}
    grown = True
    while grown:
        new = {name for name, (_, calls) in found.items() if calls & checking} - checking
        checking |= new
        grown = bool(new)
    return [
        name
        for name in functions
        if name.startswith("test_") and name not in checking and name not in CHECKS_ELSEWHERE
    ]


TEST_FILES = sorted(TESTS.rglob("test_*.py"))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: str(path.relative_to(TESTS)))
def test_every_test_checks_something(path):
    helpers = [p for p in TESTS.rglob("*.py") if not p.name.startswith("test_")]
    shared = {name: node for helper in helpers for name, node in _functions(helper).items()}
    missing = _tests_without_a_check(path, shared)
    assert not missing, f"tests with no assertion: {', '.join(missing)}"


def test_the_check_finder_sees_a_test_without_a_check(tmp_path):
    source = tmp_path / "test_example.py"
    source.write_text(
        "def helper(x):\n    assert x\n\n"
        "def indirect():\n    helper(1)\n\n"
        "def test_direct():\n    assert 1\n\n"
        "def test_through_helpers():\n    indirect()\n\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('a')\n\n"
        "def test_nothing():\n    int('1')\n"
    )
    assert _tests_without_a_check(source, {}) == ["test_nothing"]
