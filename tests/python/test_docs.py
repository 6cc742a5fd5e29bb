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
PAGES = ("model.md", "fabrics.md", "collectives.md", "fidelity.md", "workloads.md", "performance.md")


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
        text = _FENCE.sub("", page.read_text(encoding="utf-8"))
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
    "exceptions",
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
        exec(compile(code, "<example>", "exec"), {"__name__": "example", "fs": fs})
    finally:
        for name in set(fs.catalog.parts().column("name").to_pylist()) - parts:
            fs.catalog.remove_part(name)  # an example's part must not leak into the next
        if "plot." in code:
            import matplotlib.pyplot as plt

            plt.close("all")
