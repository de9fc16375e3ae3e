"""Notebook hygiene: each committed chapter is a fresh top-to-bottom run of a complete chapter."""

import re
import sys
from pathlib import Path

import pytest

from tools.notebooks import read_book

ROOT = Path(__file__).resolve().parent.parent

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
        f"{chapter.rel}: run `make sync` (the standard kernel, resolved to this environment)")
    sources = "\n".join(c.source for c in code_cells(chapter))
    assert "manual_seed(" in sources, f"{chapter.rel}: seed the random generators at the top"
    figures = [o for c in code_cells(chapter) for o in c.outputs if "image/png" in o.get("data", {})]
    assert figures, f"{chapter.rel}: a chapter has at least one figure"


def headings(chapter):
    return [line.lower() for c in chapter.notebook.cells if c.cell_type == "markdown"
            for line in c.source.splitlines() if line.startswith("#")]


def shape_problems(chapter) -> list[str]:
    """What a chapter lacks of the book's shape; an appendix needs only its summary."""
    found = headings(chapter)
    problems = [] if any("summary" in h for h in found) else ["no summary section"]
    if chapter.is_appendix:
        return problems
    if not any("exercise" in h for h in found):
        problems.append("no exercises section")
    if not any("still missing" in h or "what we can do now" in h for h in found):
        problems.append("no 'what we can do now / what is still missing' section")
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_chapter_has_a_bridge_exercises_and_a_summary(chapter):
    assert not shape_problems(chapter), f"{chapter.rel}: {shape_problems(chapter)}"


def test_chapters_are_numbered_without_gaps_and_appendices_come_after():
    chapters = [c.number for c in CHAPTERS if not c.is_appendix]
    appendices = [c.number for c in CHAPTERS if c.is_appendix]
    assert chapters == list(range(1, len(chapters) + 1))
    assert all(a > max(chapters) for a in appendices)


def test_only_an_appendix_may_go_without_exercises_and_bridge(tmp_path):
    """The rule can fail: the same notebook without exercises is refused as a chapter."""
    import nbformat

    from tools.exercise_verify import structure_problems
    from tools.notebooks import read_chapter

    def notebook(title: str):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# 14 · {title}"),
                    nbformat.v4.new_code_cell("import torch\n_ = torch.manual_seed(0)"),
                    nbformat.v4.new_markdown_cell("## Summary\n\nMeasured.")]
        path = tmp_path / "14_benchmarks.ipynb"
        nbformat.write(nb, path)
        return read_chapter(path)

    appendix = notebook("Appendix: Making it fast")
    assert appendix.is_appendix and appendix.title == "Appendix: Making it fast"
    assert shape_problems(appendix) == [] and structure_problems(appendix) == []
    chapter = notebook("Benchmarks")
    assert not chapter.is_appendix
    assert len(shape_problems(chapter)) == 2
    assert any("exercises" in p for p in structure_problems(chapter))


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
