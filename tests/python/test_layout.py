"""The package's layout, as a rule its imports keep: every module sits in one layer, every
import points to the same layer or one below it, and no import circle exists, counting every
``import`` and ``from ... import`` of the package at any depth (inside functions too), those
under ``if TYPE_CHECKING:`` excepted. :data:`LAYERS` lists the layers; docs/design.md
section 4 argues them.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import warnings

import pytest

import fabricsim

PACKAGE = pathlib.Path(fabricsim.__file__).resolve().parent

#: (layer, the modules and packages in it), lowest first: each may import its own layer and
#: the ones before it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("fabricsim._core", "fabricsim.exceptions", "fabricsim._checks", "fabricsim._files",
              "fabricsim._columns", "fabricsim.units", "fabricsim.progress")),
    ("fabrics", ("fabricsim.fabrics",)),
    ("collectives", ("fabricsim.collectives",)),
    ("scenario", ("fabricsim.results", "fabricsim.tenancy", "fabricsim.scenario_args", "fabricsim.scenario")),
    ("workloads", ("fabricsim.workloads",)),
    ("studies", ("fabricsim.studies",)),
    ("cli", ("fabricsim.cli", "fabricsim.__main__")),
    ("front", ("fabricsim", "fabricsim._moved")),
)

#: The most lines a module may have: past it, a module is a concept waiting for its own file.
MAX_LINES = 800


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer ``module`` belongs to (that of the longest
    name it is, or is inside of; the package itself holds only its front), None if none."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            inside = module.startswith(p + ".") and p != "fabricsim"
            if (module == p or inside) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def modules(root: pathlib.Path = PACKAGE) -> dict[str, tuple[pathlib.Path | None, bool]]:
    """Every module of the package: name -> (its file, whether it is a package). The
    compiled core has no source: it imports nothing of the package."""
    out: dict[str, tuple[pathlib.Path | None, bool]] = {"fabricsim._core": (None, False)}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _under_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(name: str, path: pathlib.Path, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports: every import statement at any depth but
    under ``if TYPE_CHECKING:``, each resolved to the module it names (``from x import y``
    names the module ``x.y`` where that is a module, else ``x``)."""

    def target(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        return [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]

    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _under_type_checking(child):
                for stmt in child.orelse:  # the else branch runs
                    walk(stmt)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for t in target(child):
                    while t and t not in known and "." in t:
                        t = t.rsplit(".", 1)[0]
                    if t in known and t != name and (t == "fabricsim" or t.startswith("fabricsim.")):
                        found.add(t)
            walk(child)

    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: (set() if path is None else imports_of(name, path, is_package, known))
            for name, (path, is_package) in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of two or more modules (Tarjan), and
    each module that imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a layer to a higher one, and each module in no layer."""
    out = []
    for a in sorted(graph):
        la = layer_of(a)
        if la is None:
            out.append(f"{a} is in no layer: add it to LAYERS (and to docs/design.md section 4)")
            continue
        for b in sorted(graph[a]):
            lb = layer_of(b)
            if lb is not None and lb > la:
                out.append(f"{a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]}), a layer above it")
    return out


def test_the_rule_finds_a_circle_and_an_upward_import():
    # A check that cannot fail checks nothing: a made-up graph with both faults.
    graph = {"fabricsim.fabrics.a": {"fabricsim.fabrics.b"}, "fabricsim.fabrics.b": {"fabricsim.fabrics.a"},
             "fabricsim.units": {"fabricsim.scenario"}, "fabricsim.scenario": set(), "fabricsim.nowhere": set()}
    assert cycles(graph) == [["fabricsim.fabrics.a", "fabricsim.fabrics.b"]]
    assert upward(graph) == ["fabricsim.nowhere is in no layer: add it to LAYERS (and to docs/design.md section 4)",
                             "fabricsim.units (base) imports fabricsim.scenario (scenario), a layer above it"]


def test_imports_are_read_at_any_depth_but_under_type_checking(tmp_path):
    pkg = tmp_path / "fabricsim"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "units.py").write_text("")
    (pkg / "scenario.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import units\n"
        "if TYPE_CHECKING:\n    from ..results import Result\n"
        "def f():\n    from ..scenario import Scenario\n    import fabricsim.units\n")
    mods = modules(pkg)
    path, is_package = mods["fabricsim.sub.m"]
    assert imports_of("fabricsim.sub.m", path, is_package, set(mods)) == {"fabricsim.units", "fabricsim.scenario"}


def test_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules importing each other):\n" + "\n".join(map(str, found))


def test_every_import_points_down():
    found = upward(import_graph())
    assert not found, "\n".join(found)


def test_no_module_is_too_long():
    long = {str(path.relative_to(PACKAGE)): n for name, (path, _) in modules().items() if path is not None
            and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them along their parts): {long}"


@pytest.mark.parametrize("old", sorted(fabricsim._moved.MOVED))
def test_an_old_import_path_warns_and_gives_the_module_at_its_new_path(old):
    import sys

    new = fabricsim._moved.MOVED[old]
    sys.modules.pop(old, None)  # as in a process that has not imported it yet
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    attribute = old.split(".", 1)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the package's attribute is still the module, or what it was
        if attribute != "sweep":
            assert getattr(fabricsim, attribute) is module


def test_the_sweep_function_stays_the_packages_attribute():
    from fabricsim.sweep import grid_points  # the module by its old path, no warning

    assert callable(fabricsim.sweep) and fabricsim.sweep.__module__ == "fabricsim.studies.sweep"
    assert grid_points is importlib.import_module("fabricsim.studies.sweep").grid_points
