"""The docs stand alone: the tutorial runs as written, and the generated API reference and
catalog pages match what ``scripts/gen_api_docs.py`` writes from the code today."""

from __future__ import annotations

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
GENERATOR = ROOT / "scripts" / "gen_api_docs.py"
REGENERATE = "python scripts/gen_api_docs.py"

# A ```python block, with the HTML comment before it if there is one.
_BLOCK = re.compile(r"(<!--(?P<comment>.*?)-->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def tutorial_blocks() -> list[tuple[int, str, bool]]:
    """(line, code, run) for every python block of the tutorial, in order; a block right
    after ``<!-- not run: ... -->`` is not run."""
    text = TUTORIAL.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        comment = (m.group("comment") or "").strip()
        line = text.count("\n", 0, m.start("code")) + 1
        out.append((line, m.group("code"), not comment.startswith("not run")))
    return out


def test_tutorial_runs_in_order(tmp_path, monkeypatch, capsys):
    blocks = tutorial_blocks()
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
