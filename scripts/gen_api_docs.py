"""Write docs/api.md (the API reference, from the code's signatures and docstrings) and
docs/catalog.md (every part of the hardware catalog, with units and sources).

    python scripts/gen_api_docs.py            # rewrite both files
    python scripts/gen_api_docs.py --check    # exit 1 if either is out of date

Standard library and ``inspect`` only (plus fabricsim itself). The output depends only on
the code and the shipped catalog, never on the machine, so tests/python/test_docs.py can
hold the committed files to it.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pathlib
import re
import sys
import types
from typing import Any, Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
API_PATH = ROOT / "docs" / "api.md"
CATALOG_PATH = ROOT / "docs" / "catalog.md"
COMMAND = "python scripts/gen_api_docs.py"

# The modules documented, in order: fabricsim's own __all__ first, then the submodules whose
# public functions and classes users call, by the names users reach them as (attributes of the
# package: fs.training is fabricsim.workloads.training).
MODULES = (
    "fabricsim",
    "fabricsim.training",
    "fabricsim.jobs",
    "fabricsim.serving",
    "fabricsim.reliability",
    "fabricsim.cost_model",
    "fabricsim.plot",
    "fabricsim.units",
    "fabricsim.catalog",
    "fabricsim.power",
    "fabricsim.collectives",
)

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


# --------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------


def _markdown(doc: str) -> str:
    """A docstring's reST inline markup as Markdown: ``x`` -> `x`, :role:`~a.b` -> `b`."""
    doc = re.sub(r":[a-z]+:`~([\w.]+\.)?([^`]+)`", r"`\2`", doc)
    doc = re.sub(r":[a-z]+:`([^`]+)`", r"`\1`", doc)
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)
    return doc.strip()


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


class _Annotation:
    """An annotation kept as the text it was written as (the package uses postponed
    annotations), so that it prints without quotes."""

    def __init__(self, text: str) -> None:
        quoted = len(text) > 1 and text[0] == text[-1] and text[0] in "'\""
        self.text = text[1:-1] if quoted else text

    def __repr__(self) -> str:
        return self.text


def _signature(obj: Any, method: bool = False) -> str | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None

    def bare(annotation: Any) -> Any:
        return _Annotation(annotation) if isinstance(annotation, str) else annotation

    params = list(sig.parameters.values())
    if method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    sig = sig.replace(
        parameters=[p.replace(annotation=bare(p.annotation)) for p in params],
        return_annotation=bare(sig.return_annotation),
    )
    return _ADDRESS.sub("", str(sig))


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return _markdown(doc) if doc else "*No docstring.*"


def _short(value: Any, limit: int = 100) -> str | None:
    text = _ADDRESS.sub("", repr(value))
    return text if len(text) <= limit else None


def _ours(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("fabricsim")


# --------------------------------------------------------------------------------------------
# API reference
# --------------------------------------------------------------------------------------------


def public_names(module: types.ModuleType) -> list[str]:
    """The module's ``__all__``, else its public functions and classes defined in fabricsim."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return sorted(
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj)) and _ours(obj)
    )


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties of a class, its own and those it inherits from fabricsim
    classes, in definition order."""
    seen: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if not _ours(base) and base is not cls:
            continue
        for name, obj in vars(base).items():
            if name.startswith("_"):
                continue
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            if isinstance(obj, property) or inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.ismethoddescriptor(obj):
                seen[name] = obj
    return list(seen.items())


def _function(out: list[str], qualname: str, obj: Callable[..., Any], level: str, method: bool = False) -> None:
    sig = _signature(obj, method)
    out.append(f"{level} `{qualname}`\n")
    if sig is not None:
        out.append(f"```python\n{qualname.rsplit('.', 1)[-1]}{sig}\n```\n")
    out.append(_doc(obj) + "\n")


def _class(out: list[str], qualname: str, cls: type) -> None:
    kind = "exception" if issubclass(cls, BaseException) else "class"
    out.append(f"### `{qualname}`\n")
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    sig = None if issubclass(cls, BaseException) else _signature(cls)
    head = f"{kind} {cls.__name__}" + (f"({', '.join(bases)})" if bases else "")
    out.append(f"```python\n{head}" + (f"\n{cls.__name__}{sig}" if sig else "") + "\n```\n")
    out.append(_doc(cls) + "\n")
    if issubclass(cls, BaseException):
        return
    for name, member in _members(cls):
        if isinstance(member, property):
            out.append(f"#### `{qualname}.{name}` (property)\n")
            out.append(_doc(member) + "\n")
        else:
            _function(out, f"{qualname}.{name}", member, "####", method=True)


def _constant(out: list[str], qualname: str, value: Any) -> None:
    out.append(f"### `{qualname}`\n")
    shown = None if qualname.endswith("__version__") else _short(value)
    if shown is not None:
        out.append(f"```python\n{qualname.rsplit('.', 1)[-1]} = {shown}\n```\n")
    else:
        out.append(f"A `{type(value).__name__}`.\n")


def _module(public_name: str) -> types.ModuleType:
    """A documented module by the name users reach it as (``fabricsim.catalog``: the package's
    attribute ``catalog``, wherever the module's file is)."""
    module = importlib.import_module("fabricsim")
    for attribute in public_name.split(".")[1:]:
        module = getattr(module, attribute)
    return module


def api_markdown() -> str:
    out = [
        "# fabricsim API reference\n",
        "<!-- Generated by scripts/gen_api_docs.py from the code's signatures and docstrings: "
        f"do not edit by hand; run `{COMMAND}`. -->\n",
        "Every public name, with its signature and docstring. [python-api.md](python-api.md) "
        "is the same API in one page by task, and [tutorial.md](tutorial.md) uses it step by "
        "step. All quantities are SI (bytes, seconds, bytes per second); arguments that are "
        "quantities also take unit strings (`\"400Gb/s\"`, `\"1GiB\"`, `\"2ms\"`).\n",
        "Modules:\n",
    ]
    out += [f"* [`{m}`](#{_anchor(m)})" for m in MODULES]
    out.append("")
    documented: dict[int, str] = {}  # each function or class once, where it first appears
    sections = {id(_module(m)): m for m in MODULES[1:]}
    for module_name in MODULES:
        module = _module(module_name)
        out.append(f"## {module_name}\n")
        if module.__name__ != module_name:
            out.append(f"The module `{module.__name__}`, reached as `{module_name}` (`fs.{module_name.split('.', 1)[1]}`).\n")
        out.append(_doc(module) + "\n")
        for name in public_names(module):
            obj = getattr(module, name)
            qualname = f"{module_name}.{name}"
            if (inspect.isclass(obj) or inspect.isroutine(obj)) and id(obj) in documented:
                first = documented[id(obj)]
                out.append(f"### `{qualname}`\n")
                out.append(f"The same object as [`{first}`](#{_anchor(first)}).\n")
                continue
            if inspect.isclass(obj) or inspect.isroutine(obj):
                documented[id(obj)] = qualname
            if isinstance(obj, types.ModuleType):
                first = (inspect.getdoc(obj) or "").strip().split("\n\n")[0].replace("\n", " ")
                section = sections.get(id(obj))
                where = f" (documented [below](#{_anchor(section)}))" if section is not None else ""
                out.append(f"### `{qualname}` (module){where}\n")
                out.append(_markdown(first) + "\n")
            elif inspect.isclass(obj):
                _class(out, qualname, obj)
            elif callable(obj):
                _function(out, qualname, obj, "###")
            else:
                _constant(out, qualname, obj)
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------


def _with_unit(field: str, value: Any) -> str:
    from fabricsim import units

    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (tuple, list)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, str):
        return value
    if field.endswith("_flop_per_s"):
        return f"{value / 1e12:g} TFLOP/s"
    if field.endswith("_Bps"):
        return f"{units.format_rate(value, bits=False)} ({units.format_rate(value)}) per direction"
    if field.endswith("_s"):
        return units.format_duration(value)
    if field.endswith("_watts"):
        return f"{value:g} W"
    if field.endswith("_bytes"):
        return units.format_bytes(value, binary=False)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def catalog_markdown() -> str:
    from fabricsim import catalog

    try:  # aliases live with the shipped data; shown where the catalog still has them there
        aliases: dict[str, str] = dict(catalog._load_shipped()[1])
    except Exception:  # pragma: no cover - an older catalog module
        aliases = {}
    by_target: dict[str, list[str]] = {}
    for alias, target in sorted(aliases.items()):
        by_target.setdefault(target, []).append(alias)

    kinds = catalog.kinds()
    out = [
        "# The hardware catalog\n",
        "<!-- Generated by scripts/gen_api_docs.py from fabricsim/fabrics/data/catalog.json: do not "
        f"edit by hand; run `{COMMAND}`. -->\n",
        "Every part fabricsim ships, by kind, with each field's value and where the figure "
        "comes from. In Python: `fs.catalog.parts(kind)` (an Arrow table), "
        "`fs.catalog.part(name)` (one part; `.sources` maps each field to its source). Values "
        "are stored in SI units (`_Bps` bytes per second per direction, `_s` seconds, "
        "`_watts` watts, `_bytes` bytes); below they are also shown in the usual units. "
        "Sources are a URL, or tagged `[2nd]` (a secondary source), `[derived]` (arithmetic "
        "from sourced figures), `[assumed]` (with the reason) or `[no source]` (what was "
        "searched; only for a value of none). `fabricsim.catalog`'s docstring describes "
        "every field ([api.md](api.md#fabricsimcatalog)).\n",
    ]
    for kind in kinds:
        names = catalog.parts(kind).column("name").to_pylist()
        links = ", ".join(f"[{n}](#{_anchor(n)})" for n in names)
        out.append(f"* **{kind}** ({len(names)}): {links}")
    out.append("")
    for kind, fields in kinds.items():
        out.append(f"## {kind}\n")
        for name in catalog.parts(kind).column("name").to_pylist():
            part = catalog.part(name)
            out.append(f"### {name}\n")
            if part.description:
                out.append(_cell(part.description) + "\n")
            if name in by_target:
                out.append("Also known as: " + ", ".join(f"`{a}`" for a in by_target[name]) + ".\n")
            out.append("| field | value | source |")
            out.append("|---|---|---|")
            for field in fields:
                value = part[field]
                shown = _with_unit(field, value)
                plain = value is None or isinstance(value, (bool, str, tuple, list)) or shown == str(value)
                raw = "" if plain else f" (`{value!r}`)"
                source = part.sources.get(field, "")
                out.append(f"| `{field}` | {_cell(shown)}{raw} | {_cell(source) or '-'} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------------------------


def outputs() -> dict[pathlib.Path, str]:
    """Each generated file and the text it should hold."""
    return {API_PATH: api_markdown(), CATALOG_PATH: catalog_markdown()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/api.md and docs/catalog.md from the code.")
    parser.add_argument("--check", action="store_true", help="only report files that are out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if args.check and stale:
        print("out of date: " + ", ".join(str(p.relative_to(ROOT)) for p in stale) + f"; run `{COMMAND}`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
