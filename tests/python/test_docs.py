"""The docs stand alone: the tutorial and every page's examples run as written, every link
between the pages resolves, and the generated API reference and catalog pages match what
``scripts/gen_api_docs.py`` writes from the code today."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
GENERATOR = ROOT / "scripts" / "gen_api_docs.py"
REGENERATE = "python scripts/gen_api_docs.py"

# A ```python block, with the HTML comment before it if there is one.
_BLOCK = re.compile(r"(<!--(?P<comment>.*?)-->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def page_blocks(path: pathlib.Path) -> list[tuple[int, str, bool]]:
    """(line, code, run) for every python block of a page, in order; a block right after
    ``<!-- not run: ... -->`` is not run."""
    text = path.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        comment = (m.group("comment") or "").strip()
        line = text.count("\n", 0, m.start("code")) + 1
        out.append((line, m.group("code"), not comment.startswith("not run")))
    return out


def tutorial_blocks() -> list[tuple[int, str, bool]]:
    return page_blocks(TUTORIAL)


# The optional dependencies an example may use, and how its code shows it.
_OPTIONAL = {
    "networkx": re.compile(r"^\s*(import|from)\s+networkx\b", re.M),
    "matplotlib": re.compile(r"\bplot\.|^\s*(import|from)\s+matplotlib\b", re.M),
    "polars": re.compile(r"^\s*(import|from)\s+polars\b", re.M),
    "duckdb": re.compile(r"^\s*(import|from)\s+duckdb\b", re.M),
}


def skip_without_what_it_imports(code: str) -> None:
    """Skips the calling test, before it runs anything, where ``code`` needs an optional
    dependency that is not installed."""
    for module, used in _OPTIONAL.items():
        if used.search(code):
            pytest.importorskip(module, reason=f"the example needs {module}")


def test_tutorial_runs_in_order(tmp_path, monkeypatch, capsys):
    blocks = tutorial_blocks()
    skip_without_what_it_imports("".join(code for _, code, run in blocks if run))
    assert sum(run for _, _, run in blocks) >= 10, "the tutorial lost its examples"
    skipped = [code for _, code, run in blocks if not run]
    # The million-GPU block is shown but not run (tens of seconds, ~7 GB).
    assert len(skipped) == 1 and "n_domains=14_564" in skipped[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "tutorial"}
    for line, code, run in blocks:
        if run:
            # Padding keeps tracebacks' line numbers those of docs/tutorial.md.
            exec(compile("\n" * (line - 1) + code, str(TUTORIAL), "exec"), namespace)
    out = capsys.readouterr().out
    assert "nvls_sharp" in out and "fast" in out


# The pages whose python blocks run in order, each page in one namespace, as the tutorial's do
# (workflows.md's run in test_plot.py, which checks the files they write).
PAGES = ("model.md", "fabrics.md", "collectives.md", "fidelity.md", "workloads.md", "performance.md", "interop.md")


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run_in_order(page, tmp_path, monkeypatch, capsys):
    path = ROOT / "docs" / page
    blocks = page_blocks(path)
    skip_without_what_it_imports("".join(code for _, code, run in blocks if run))
    assert any(run for _, _, run in blocks), f"{page} lost its examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": page}
    for line, code, run in blocks:
        if run:
            exec(compile("\n" * (line - 1) + code, str(path), "exec"), namespace)


# A Markdown link's target, outside code: [text](target), target without spaces.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"```.*?```", re.S)
# An indented code block (docs/api.md's examples): lines indented 4 spaces or a tab after a
# blank line, which Markdown shows as code, links and all (ibnetdiscover's "[1](guid)").
_INDENTED = re.compile(r"(?m)(?<=\n\n)(?:(?: {4}|\t).*(?:\n|$))+")


def anchors(path: pathlib.Path) -> set[str]:
    """The anchors a page has: each heading's (GitHub's rule: lower case, punctuation but
    hyphens and underscores dropped, spaces as hyphens; a repeated one numbered) and each
    ``<a id="...">``."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    out: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+?)\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_links_between_pages_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
             ROOT / "RELIABILITY.md"]
    broken = []
    for page in pages:
        text = _INDENTED.sub("", _FENCE.sub("", page.read_text(encoding="utf-8")))
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto: ...: outside the repository
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such anchor)")
    assert not broken, "\n".join(broken)


def _repository_text_files() -> list[pathlib.Path]:
    return [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".py", ".pyi", ".md", ".json", ".toml", ".rs", ".txt")
            and not any(part in (".git", ".venv", "target", ".asv", "build") or part.startswith(".")
                        for part in p.relative_to(ROOT).parts)]


def _lines_matching(pattern: re.Pattern[str], suffixes: tuple[str, ...]) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n}" for p in _repository_text_files() if p.suffix in suffixes and p.name != "test_docs.py"
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if pattern.search(line)]


def test_no_citation_leaves_the_repository():
    # The sources are in docs/sources.md and in the data files' source fields; nothing cites
    # notes that are not in the repository.
    cited = re.compile(r"reference/|hardware\.md|compute\.md|nccl-alltoall\.md|(?<![\w/])training\.md")
    found = _lines_matching(cited, (".py", ".pyi", ".md", ".json", ".toml", ".rs", ".txt"))
    assert not found, f"citations of notes outside the repository: {found}"


def test_code_and_docs_speak_of_themselves_not_of_issues():
    # A reader of the code has no issue tracker: "(issue 27)" says nothing to them. (The Rust
    # files are left to whoever next changes them.)
    found = _lines_matching(re.compile(r"\b[Ii]ssues? [0-9]"), (".py", ".pyi", ".md", ".json", ".toml", ".txt"))
    assert not found, f"issue numbers where the code should say what it does: {found}"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_api_docs", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_generated(path: pathlib.Path, expected: str) -> None:
    rel = path.relative_to(ROOT)
    assert path.exists(), f"{rel} is missing: run `{REGENERATE}` and commit it"
    current = path.read_text(encoding="utf-8")
    if current != expected:
        import difflib

        diff = "".join(
            list(difflib.unified_diff(current.splitlines(True), expected.splitlines(True), f"{rel} (committed)", f"{rel} (generated)"))[:40]
        )
        raise AssertionError(f"{rel} is out of date with the code: run `{REGENERATE}` and commit it.\n{diff}")


def test_api_reference_is_current():
    gen = _generator()
    _check_generated(gen.API_PATH, gen.api_markdown())


def test_catalog_page_is_current():
    gen = _generator()
    _check_generated(gen.CATALOG_PATH, gen.catalog_markdown())


def test_catalog_page_lists_every_part_and_source():
    import fabricsim as fs

    text = (ROOT / "docs" / "catalog.md").read_text(encoding="utf-8")
    for kind, fields in fs.catalog.kinds().items():
        assert f"\n## {kind}\n" in text
        for name in fs.catalog.parts(kind).column("name").to_pylist():
            part = fs.catalog.part(name)
            section = text.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
            for field in fields:
                assert f"| `{field}` |" in section, (name, field)
                source = part.sources.get(field)
                if source:
                    assert source.replace("|", "\\|").replace("\n", " ") in section, (name, field)


def test_api_reference_covers_the_public_names():
    import fabricsim as fs

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for name in fs.__all__:
        assert f"### `fabricsim.{name}`" in text, name
    assert "*No docstring.*" not in text, "a public object lost its docstring"


# --------------------------------------------------------------------------------------------
# Every public object has an example, and every example runs
# --------------------------------------------------------------------------------------------

# The public modules whose names (``__all__``, else their public functions and classes) must
# carry an example, besides ``fabricsim.__all__``.
EXAMPLE_MODULES = (
    "workloads.training", "workloads.jobs", "workloads.serving", "fabrics.power", "workloads.reliability",
    "fabrics.catalog", "units", "studies.plot", "studies.trace", "collectives.cost.model", "collectives.cost.nccl",
    "collectives.calibration", "studies.validation", "studies.sweep", "studies.scenario_file", "results", "fabrics",
    "exceptions", "workloads.chakra", "fabrics.ibnetdiscover",
)

_EXAMPLE = re.compile(r"^(?P<indent>[ ]*)Example::[ ]*\n(?P<body>(?:[ ]*\n|(?P=indent)[ ]+\S.*\n?)+)", re.M)


def _public_objects() -> dict[str, object]:
    """Every public function, class and method of the package, once each (where it is first
    reached: ``fabricsim.X`` before ``fabricsim.module.X``), by qualified name."""
    import importlib
    import inspect

    import fabricsim as fs

    def ours(obj: object) -> bool:
        return (getattr(obj, "__module__", None) or "").startswith("fabricsim")

    top: list[tuple[str, object]] = [(f"fabricsim.{n}", getattr(fs, n)) for n in fs.__all__]
    for module_name in EXAMPLE_MODULES:
        module = importlib.import_module(f"fabricsim.{module_name}")
        names = getattr(module, "__all__", None)
        if names is None:
            names = sorted(n for n, o in vars(module).items()
                           if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o)) and ours(o))
        top += [(f"fabricsim.{module_name}.{n}", getattr(module, n)) for n in names]

    found: dict[str, object] = {}
    seen: set[int] = set()

    def add(name: str, obj: object) -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            found[name] = obj

    for name, obj in top:
        if not (inspect.isclass(obj) or inspect.isroutine(obj)) or not ours(obj):
            continue  # modules, constants, __version__
        add(name, obj)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            # public methods, its own and those inherited from fabricsim classes (once: a
            # method Fabric inherits from Topology is Topology's)
            for base in reversed(obj.__mro__):
                if base is not obj and not ours(base):
                    continue
                for member_name, member in vars(base).items():
                    if member_name.startswith("_"):
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        owner = name if base is obj else f"{base.__module__}.{base.__qualname__}"
                        add(f"{owner}.{member_name}", member)
    return found


def _examples(obj: object) -> list[str]:
    import inspect
    import textwrap

    doc = inspect.getdoc(obj) or ""
    return [textwrap.dedent(m.group("body")).strip("\n") + "\n" for m in _EXAMPLE.finditer(doc + "\n")]


def _all_examples() -> list[tuple[str, str]]:
    out = []
    for name, obj in _public_objects().items():
        blocks = _examples(obj)
        for i, code in enumerate(blocks):
            out.append((name if len(blocks) == 1 else f"{name}[{i}]", code))
    return out


def test_every_public_object_has_an_example():
    objects = _public_objects()
    assert len(objects) > 150, "the walk over the public API lost objects"
    missing = sorted(name for name, obj in objects.items() if not _examples(obj))
    assert not missing, f"{len(missing)} public objects have no 'Example::' block in their docstring: {missing}"


EXAMPLES = _all_examples()


# --------------------------------------------------------------------------------------------
# The values an example states are checked
# --------------------------------------------------------------------------------------------
#
# An example states a value the way a reader expects it, as a doctest would: a comment at the
# end of an expression statement (or of an assignment to one name), or on the line right below
# it, that begins with a value is that expression's (or name's) value, and the test checks it:
#
#   fs.units.size_bytes("1GiB")   # 1073741824.0
#   e.algorithm, e.protocol       # ('nvls', 'simple'): NCCL's choice
#   fs.estimate(...).time_s       # about 5.4 ms
#   f = fs.hgx_h100()             # Fabric(n_gpus=8, n_nodes=12, n_links=288)
#   except fs.WriteError as e: print(e)   # cannot write 'taken': ...
#
# * A value begins with a digit, a sign, a quote, a bracket, True, False or None, a repr such
#   as ``Fabric(`` or ``array(``, or ``about``. What follows it after ``,``, ``:``, ``=`` or a
#   space is prose. A comment that begins with a word is prose, never checked.
# * A Python literal is compared with ``==``, each float in it to the digits it is written
#   with (``6.8e-06`` is 6.8e-06 to two significant digits); a repr, or a value with ``...``
#   in it, by its text (spaces aside, ``...`` standing for anything).
# * ``about N unit`` (s, ms, us, GB/s, GB, tokens/s; none for a plain number), or several
#   joined by ``and`` or ``,`` for a tuple, is N to its last significant digit in that unit.
# * On a ``print(...)``, the value is the whole text printed (``...`` standing for anything);
#   in the body of an ``except`` clause, whatever word the message begins with.

import ast
import contextlib
import io
import tokenize

_VALUE_START = re.compile(r"(about\s|[-+]?\.?\d|['\"\[\(\{]|True\b|False\b|None\b|b['\"]|[A-Za-z_][\w.]*\()")
_DELIMITERS = ",:;= "
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "GB/s": 1e9, "TB/s": 1e12, "GB": 1e9, "MB": 1e6,
          "tokens/s": 1.0, "": 1.0}
_NUMBER_UNIT = re.compile(r"([-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d*\.?\d+(?:e[-+]?\d+)?)\s*"
                          r"(ms|us|ns|s|GB/s|TB/s|GB|MB|tokens/s)?(?![\w/])")
_THOUSANDS = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])")


def _trailing_comments(code: str) -> dict[int, str]:
    """Line number -> the text of the comment that ends a line of code, or (beginning with a
    value, as a doctest's output would) stands on the line right below it."""
    out: dict[int, str] = {}
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            line, text = tok.start[0], tok.string[1:].strip()
            if line in code_lines:
                out[line] = text
            elif line - 1 in code_lines and line - 1 not in out and _VALUE_START.match(text):
                out[line - 1] = text
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(tok.start[0])
    return out


def _significant(written: str) -> float:
    """Half a unit of the last significant digit of a number as written ("0.47": 0.005,
    "35,000": 500, "6.8e-06": 5e-08)."""
    mantissa, _, exponent = written.replace(",", "").lower().partition("e")
    scale = 10.0 ** int(exponent or 0)
    if "." in mantissa:
        return 0.5 * 10.0 ** -len(mantissa.split(".")[1]) * scale
    digits = mantissa.lstrip("+-")
    zeros = len(digits) - len(digits.rstrip("0")) if digits.strip("0") else 0
    return 0.5 * 10.0 ** zeros * scale


def _plain(value):
    """A result as the comparison sees it: Arrow and NumPy values as Python ones."""
    import numpy as np

    if hasattr(value, "to_pylist"):
        return value.to_pylist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _literal_matches(expected, written_floats, actual) -> bool:
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        tol = _significant(written_floats.pop(0)) if written_floats else 0.0
        return abs(actual - expected) <= tol * (1 + 1e-9) + 1e-300
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        return (type(expected) is type(actual) and len(expected) == len(actual)
                and all(_literal_matches(e, written_floats, a) for e, a in zip(expected, actual)))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            _literal_matches(expected[k], written_floats, actual[k]) for k in expected)
    return expected == actual and type(expected) is type(actual) or (
        isinstance(expected, int) and isinstance(actual, float) and float(expected) == actual)


def _text_matches(pattern: str, text: str) -> bool:
    squeeze = lambda t: re.sub(r"\s+", "", t)  # noqa: E731
    regex = ".*?".join(re.escape(part) for part in squeeze(pattern).split("..."))
    return re.fullmatch(regex, squeeze(text), re.S) is not None


def _about_mismatch(text: str, actual) -> str | None:
    """None if ``actual`` is what ``about N unit[, M unit ...]`` says, else why not. The
    numbers end at the first ``;`` or ``:``; one per element of a tuple."""
    stated = _NUMBER_UNIT.findall(re.split(r"[;:]", text[len("about"):], maxsplit=1)[0])
    value = _plain(actual)
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(stated) != len(items):
        return f"states {len(stated)} value(s) for {len(items)}"
    for (number, unit), got in zip(stated, items):
        got_in_unit = got / _UNITS[unit]
        if abs(got_in_unit - float(number.replace(",", ""))) > _significant(number) * (1 + 1e-9):
            return f"is {got_in_unit:.6g} {unit}".rstrip()
    return None


def _balanced_head(text: str) -> str:
    """The value at the start of ``text`` that brackets delimit: up to where the first
    bracket opened closes (a repr, a tuple of reprs), else up to the first delimiter."""
    depth, quote = 0, None
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"" and depth:
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[:i + 1]
        elif depth == 0 and c in _DELIMITERS:
            return text[:i]
    return text


def _candidates(text: str):
    """The comment's starts that end where a value may end, longest first."""
    cuts = [len(text)] + [i for i in range(len(text) - 1, 0, -1) if text[i] in _DELIMITERS]
    seen = set()
    for i in cuts:
        head = text[:i].rstrip(_DELIMITERS)
        if head and head not in seen:
            seen.add(head)
            yield head


def stated_value_mismatch(text: str, actual) -> str | None:
    """None if ``actual`` is the value the comment ``text`` states, else what is wrong."""
    if text.startswith("about"):
        return _about_mismatch(text, actual)
    value = _plain(actual)
    literal = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    if "..." not in _balanced_head(text):
        for head in _candidates(literal):
            try:
                expected = ast.literal_eval(head)
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                continue
            floats = [f for f in re.findall(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?", head)
                      if any(c in f.lower() for c in ".e")]
            return None if _literal_matches(expected, floats, value) else f"is {value!r}"
    head = _balanced_head(text)
    shown = repr(value) if hasattr(actual, "to_pylist") else repr(actual)
    return None if _text_matches(head, shown) else f"repr is {shown!r}"


class _StatedValues(ast.NodeTransformer):
    """Rewrites each statement whose trailing comment states a value into one that also
    checks it (``__stated__(line, value)``)."""

    def __init__(self, comments: dict[int, str]) -> None:
        self.comments = comments
        self.checked: set[int] = set()
        self.in_except = False

    def _stated(self, node: ast.stmt) -> str | None:
        text = self.comments.get(node.end_lineno)
        return text if text is not None and (_VALUE_START.match(text) or self.in_except) else None

    def _call(self, name: str, line: int, value: ast.expr) -> ast.stmt:
        return ast.Expr(ast.Call(ast.Name(name, ast.Load()), [ast.Constant(line), value], []))

    def visit_ExceptHandler(self, node):
        self.in_except = True
        self.generic_visit(node)
        self.in_except = False
        return node

    def visit_Expr(self, node):
        if self._stated(node) is None:
            return node
        self.checked.add(node.end_lineno)
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
            return ast.copy_location(self._call("__printed__", node.end_lineno, ast.Lambda(
                ast.arguments([], [], None, [], [], None, []), call)), node)
        if self.in_except or not _VALUE_START.match(self.comments[node.end_lineno]):
            return node
        return ast.copy_location(self._call("__stated__", node.end_lineno, call), node)

    def visit_Assign(self, node):
        if self._stated(node) is None or self.in_except or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return node
        self.checked.add(node.end_lineno)
        check = self._call("__stated__", node.end_lineno, ast.Name(node.targets[0].id, ast.Load()))
        return [node, ast.copy_location(check, node)]


def run_checking_stated_values(code: str, namespace: dict, filename: str = "<example>") -> None:
    """Runs ``code`` in ``namespace``, checking every value its comments state."""
    comments = _trailing_comments(code)
    tree = _StatedValues(comments)
    module = ast.fix_missing_locations(tree.visit(ast.parse(code)))
    wrong: list[str] = []

    def stated(line: int, value) -> None:
        why = stated_value_mismatch(comments[line], value)
        if why:
            wrong.append(f"line {line}: `{code.splitlines()[line - 1].strip()}` {why}")

    def printed(line: int, show) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            show()
        text = out.getvalue().rstrip("\n")
        print(text)
        if not _text_matches(comments[line], text):
            wrong.append(f"line {line}: `{code.splitlines()[line - 1].strip()}` printed {text!r}")

    namespace.update(__stated__=stated, __printed__=printed)
    exec(compile(module, filename, "exec"), namespace)
    assert not wrong, "values the example states are not what it gives:\n" + "\n".join(wrong)


@pytest.mark.parametrize("code, wrong", [
    ("x = 2 + 2   # 5", "is 4"),
    ("1.54e6   # 1.6e6: to its written digits", "is 1540000.0"),
    ("'a', 2   # ('a', 3)", "is ('a', 2)"),
    ("round(0.471, 3)   # about 0.48", "is 0.471"),
    ("0.0047, 2e9   # about 4.6 ms and 2 GB/s", "is 4.7 ms"),
    ("[1, 2]\n# [1, 3]", "is [1, 2]"),
    ("print(42, 'apples')   # 42 pears", "printed '42 apples'"),
    ("try: 1 / 0\nexcept ZeroDivisionError as e: print(e)   # division by one", "printed 'division by zero'"),
    ("import numpy as np\nnp.arange(3)   # array([0, 1, 3])", "repr is 'array([0, 1, 2])'"),
    ("frozenset()   # frozenset({1})", "repr is 'frozenset()'"),
])
def test_a_value_an_example_states_wrongly_fails_it(code, wrong):
    with pytest.raises(AssertionError, match=re.escape(wrong)):
        run_checking_stated_values(code, {})


def test_values_stated_as_written_pass_and_prose_is_not_read():
    run_checking_stated_values(
        "x = 2 + 2   # 4: two and two\n"
        "1.55e6   # 1.6e6 (not 1.55)\n"
        "'a', 2   # ('a', 2)\n"
        "0.0047, 2e9   # about 4.7 ms and 2 GB/s, rounded\n"
        "123456   # 123,456\n"
        "[1, 2]\n# [1, 2], on the line below\n"
        "print(42, 'apples')   # 42 ...les\n"
        "y = 3   # three, in words: prose\n"
        "import numpy as np\nnp.arange(3)   # array([0, 1, 2])\n", {})


def test_most_examples_state_a_value_and_every_one_is_checked():
    # A value comment the transform did not reach would be prose to it: count what it checks.
    checked = 0
    for _, code in EXAMPLES:
        transform = _StatedValues(_trailing_comments(code))
        transform.visit(ast.parse(code))
        checked += len(transform.checked)
    assert checked >= 150, checked


@pytest.mark.parametrize("code", [c for _, c in EXAMPLES], ids=[n for n, _ in EXAMPLES])
def test_example_runs(code, tmp_path, monkeypatch, capsys):
    skip_without_what_it_imports(code)
    import fabricsim as fs

    if "plot." in code:
        import matplotlib

        matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # examples that write files write here
    parts = set(fs.catalog.parts().column("name").to_pylist())
    try:
        run_checking_stated_values(code, {"__name__": "example", "fs": fs})
    finally:
        for name in set(fs.catalog.parts().column("name").to_pylist()) - parts:
            fs.catalog.remove_part(name)  # an example's part must not leak into the next
        if "plot." in code:
            import matplotlib.pyplot as plt

            plt.close("all")
