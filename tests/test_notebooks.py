"""Notebook hygiene: each committed chapter is a fresh top-to-bottom run of a complete chapter."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from notebooks import read_book  # noqa: E402

CHAPTERS = read_book()


def code_cells(chapter):
    return [c for c in chapter.notebook.cells if c.cell_type == "code" and c.source.strip()]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_committed_notebook_is_a_fresh_top_to_bottom_run(chapter):
    counts = [c.execution_count for c in code_cells(chapter)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{chapter.rel}: execution counts {counts}; run `make execute NB={chapter.rel}`")
    errors = [o for c in code_cells(chapter) for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{chapter.rel} stores an error output"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_chapter_has_title_seed_figure_and_kernel(chapter):
    first = chapter.notebook.cells[0]
    assert first.cell_type == "markdown" and re.match(rf"# {chapter.number:02d} · \S", first.source)
    assert chapter.notebook.metadata["kernelspec"]["name"] == "python3", (
        f"{chapter.rel}: run `make stamp` (the standard kernel, resolved to this environment)")
    sources = "\n".join(c.source for c in code_cells(chapter))
    assert "manual_seed(" in sources, f"{chapter.rel}: seed the random generators at the top"
    figures = [o for c in code_cells(chapter) for o in c.outputs if "image/png" in o.get("data", {})]
    assert figures, f"{chapter.rel}: a chapter has at least one figure"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_chapter_has_a_bridge_exercises_and_a_summary(chapter):
    headings = [line.lower() for c in chapter.notebook.cells if c.cell_type == "markdown"
                for line in c.source.splitlines() if line.startswith("#")]
    assert any("exercise" in h for h in headings), f"{chapter.rel}: no exercises section"
    assert any("summary" in h for h in headings), f"{chapter.rel}: no summary section"
    assert any("still missing" in h or "what we can do now" in h for h in headings), (
        f"{chapter.rel}: no 'what we can do now / what is still missing' section")


def test_chapters_are_numbered_without_gaps():
    assert [c.number for c in CHAPTERS] == list(range(1, len(CHAPTERS) + 1))


def test_nbval_fails_when_a_stored_output_of_chapter_01_changes(tmp_path):
    """nbval is strict: a changed stored output is caught (the check can fail)."""
    import subprocess

    import nbformat

    notebook = nbformat.read(ROOT / "chapters" / "01_embedding.ipynb", as_version=4)
    cell = next(c for c in notebook.cells if c.cell_type == "code"
                and any(o.output_type == "stream" for o in c.outputs))
    stream = next(o for o in cell.outputs if o.output_type == "stream")
    stream.text = stream.text.replace("1", "7", 1) if "1" in stream.text else stream.text + "x"
    nbformat.write(notebook, tmp_path / "01_embedding.ipynb")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
         "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
         str(ROOT / "tools" / "sanitize.cfg"), str(tmp_path / "01_embedding.ipynb")],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert run.returncode == 1, run.stdout[-2000:]
    assert "1 failed" in run.stdout
