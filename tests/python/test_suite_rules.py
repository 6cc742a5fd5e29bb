"""Rules the test suite keeps so that its tests check what they claim: an optional dependency
is skipped before a test checks anything (never a collection error, never a pass turned into
a skip), and every property test asserts how often it reaches what it is named for."""

from __future__ import annotations

import ast
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
# The test extra's optional packages (pyproject.toml): a run without one skips what needs it.
OPTIONAL = {"networkx", "matplotlib", "polars", "duckdb", "distributed", "dask", "jsonschema", "mypy"}


def _modules():
    return sorted(p for p in HERE.glob("*.py") if p.name != "conftest.py")


def _imported(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return {node.module.split(".")[0]}
    return set()


def _skip_of(call: ast.AST) -> set[str]:
    """The module ``call`` skips for, if it is a ``pytest.importorskip("x")``."""
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "importorskip"
            and call.args and isinstance(call.args[0], ast.Constant)):
        return {str(call.args[0].value).split(".")[0]}
    return set()


def _skipped(node: ast.AST) -> set[str]:
    """The modules a ``pytest.importorskip("x")`` somewhere in ``node`` asks for."""
    return set().union(*(_skip_of(call) for call in ast.walk(node)))


def _guarded(node: ast.stmt) -> bool:
    """An import inside ``try: ... except ImportError``, which handles the module's absence."""
    return isinstance(node, ast.Try) and any(
        isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers)


def _skip_helpers(tree: ast.Module) -> set[str]:
    """The module's functions that skip for whatever they are given (importorskip of a name
    they compute), such as test_docs.skip_without_what_it_imports."""
    return {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "importorskip"
        and c.args and not isinstance(c.args[0], ast.Constant) for c in ast.walk(f))}


def test_optional_dependencies_are_skipped_before_anything_is_checked():
    wrong = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        helpers = _skip_helpers(tree)
        skipped: set[str] = set()
        for node in tree.body:  # the module's top: an import there fails collection
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                skipped |= _skipped(node)
            for name in _imported(node) & OPTIONAL - skipped:
                wrong.append(f"{path.name}:{node.lineno}: imports {name} at the top without importorskip")
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name not in helpers):
            nodes = list(ast.walk(func))
            first_check = min((n.lineno for n in nodes
                               if isinstance(n, ast.Assert) or (isinstance(n, ast.Attribute) and n.attr == "raises")),
                              default=None)
            guarded = {id(n) for t in nodes if _guarded(t) for n in ast.walk(t)}
            skips: dict[str, int] = {}
            for n in nodes:
                if not isinstance(n, ast.Call):
                    continue
                names = OPTIONAL if isinstance(n.func, ast.Name) and n.func.id in helpers else _skip_of(n)
                for name in names:
                    skips[name] = min(skips.get(name, n.lineno), n.lineno)
                    if first_check is not None and n.lineno > first_check:
                        wrong.append(f"{path.name}:{n.lineno}: {func.name} skips for {name} after it checked "
                                     f"something (line {first_check}): a pass would read as a skip")
            for n in nodes:
                if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in guarded:
                    for name in _imported(n) & OPTIONAL - skipped:
                        if skips.get(name, n.lineno + 1) > n.lineno:
                            wrong.append(f"{path.name}:{n.lineno}: {func.name} imports {name} without importorskip")
    assert not wrong, "\n".join(wrong)


def test_every_property_test_asserts_what_it_reaches():
    # A property test whose strategy drifts into refusals passes without checking anything
    # unless it asserts its reach (hostile.assert_reach); a bare @given has no such guard.
    wrong = []
    for path in HERE.glob("test_properties*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in tree.body:
            if not isinstance(func, ast.FunctionDef) or not func.name.startswith("test_"):
                continue
            calls = {n.func.id for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            decorators = {d.func.id if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) else getattr(d, "id", "")
                          for d in func.decorator_list}
            if "given" in decorators:
                wrong.append(f"{path.name}: {func.name} runs @given directly: use hostile.explore and assert_reach")
            if "explore" in calls and "assert_reach" not in calls:
                wrong.append(f"{path.name}: {func.name} explores without asserting its reach")
    assert not wrong, "\n".join(wrong)
