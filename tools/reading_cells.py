"""The website's reading copy of a chapter, cell by cell: what each code cell shows.

The lines that steer the book's tools, not the reader, are dropped, and the cell is
tagged for what they meant (`for_reading`): `#| default_exp`, `#| export [MODULE]`
(tag `export-MODULE`), `#| check NAME` (tag `check`), nbval's directives
(`# NBVAL_IGNORE_OUTPUT`: tag `output-varies`) and nbgrader's hidden-tests markers;
the figure options (`#| fig-cap:`, `#| fig-alt:`) are returned for the caption. The
student edition starts from `student_view`: the student copy with the outputs of the
chapter's own cells.

Used by tools/website.py (`reading_copy`), which adds what is written in the reader's
language: the figures' captions, the solutions' buttons, the box under the title.
"""

from __future__ import annotations

import copy
import re

import nbformat

from tools.figures import figure_options
from tools.notebooks import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    END_HIDDEN,
    END_SOLUTION,
    Chapter,
    check_directive,
    directive,
    solution_regions,
)
from tools.student_copies import student_copy

# Lines that steer the test tools, not the reader: nbval's directives (`# NBVAL_IGNORE_OUTPUT`
# and the others) and nbgrader's hidden-tests markers. The reading copy drops them and says
# in a quiet label what the first one meant.
TEST_DIRECTIVE = re.compile(r"^\s*#\s*NBVAL_[A-Z_]+\s*$")
HIDDEN_MARKER = re.compile(rf"^\s*({re.escape(BEGIN_HIDDEN)}|{re.escape(END_HIDDEN)})\s*$")


def tag(cell: nbformat.NotebookNode, *tags: str) -> None:
    """Add tags to a cell's metadata, each once."""
    existing = cell.metadata.setdefault("tags", [])
    existing.extend(t for t in tags if t not in existing)


def without_markers(source: str) -> str:
    """A solution cell's source without its solution-region marker lines."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))


def has_figure(cell: nbformat.NotebookNode) -> bool:
    """Whether a cell's outputs hold an image (a figure, which the site numbers)."""
    return any(o.get("data", {}).keys() & {"image/png", "image/svg+xml", "image/jpeg"}
               for o in cell.get("outputs", []))


def student_view(notebook: nbformat.NotebookNode, chapter: str) -> nbformat.NotebookNode:
    """The student copy (tools/student_copies.py: solutions stubbed, hidden tests removed), with
    the outputs of the chapter's own cells put back, so that the student edition of the site
    reads like the book; exercise and check cells keep no output, as in the student copy."""
    student = student_copy(notebook, chapter)
    for original, cell in zip(notebook.cells, student.cells, strict=True):
        if cell.cell_type != "code" or solution_regions(original.source) \
                or check_directive(original.source):
            continue
        cell.outputs = copy.deepcopy(original.get("outputs", []))
        cell.execution_count = original.get("execution_count")
    return student


def for_reading(cell: nbformat.NotebookNode, chapter: Chapter) -> dict[str, str]:
    """Drop a code cell's directive and test-tool lines, in place, tagging the cell for
    what they meant; return its figure options (`#| fig-cap:`, `#| fig-alt:`)."""
    options, source = figure_options(cell.source)
    lines = source.splitlines()
    if any(TEST_DIRECTIVE.match(line) and "IGNORE_OUTPUT" in line for line in lines):
        tag(cell, "output-varies")
    kept = [line for line in lines
            if not ((found := directive(line)) and found[0] == "default_exp")
            and not TEST_DIRECTIVE.match(line) and not HIDDEN_MARKER.match(line)]
    first = directive(kept[0]) if kept else None
    if first and first[0] == "export":
        kept = kept[1:]
        tag(cell, "export-" + (first[1] or chapter.default_module or "package"))
    elif first and first[0] == "check":
        kept = kept[1:]
        tag(cell, "check")
    cell.source = "\n".join(kept).strip("\n")
    return options
