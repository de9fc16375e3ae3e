"""Reading chapter notebooks: the one place that knows the book's directives.

A chapter is `chapters/NN_name.ipynb`, paired with `chapters/NN_name.py`
(jupytext, py:percent). Inside it:

- `#| default_exp MODULE` (once, anywhere in a code cell) names the module that
  the chapter's `#| export` cells go to;
- a code cell whose first line is `#| export` goes into that module, and one
  whose first line is `#| export OTHER` goes into `transformer/OTHER.py`;
- an exercise's solution sits between `### BEGIN SOLUTION` and
  `### END SOLUTION` (nbgrader's markers);
- a code cell whose first line is `#| check NAME` is the check that grades
  exercise NAME.

An **appendix** is a notebook whose title reads "Appendix: ..." (`# 14 · Appendix:
Benchmarks`). It follows the same pipeline (executed, paired, nbval, may export a
module) but is reference material, not a step of the derivation: it needs no
exercises and no "what is still missing" bridge. Appendices are numbered after every
chapter; chapters are numbered 01, 02, ... without gaps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
PACKAGE = ROOT / "transformer"

CHAPTER_NAME = re.compile(r"^(\d\d)_[a-z0-9_]+$")
DIRECTIVE = re.compile(r"^#\|\s*(\w+)(?:\s+(.*?))?\s*$")
BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"


class BookError(Exception):
    """A chapter breaks one of the book's rules; the message says which and how to fix it."""


@dataclass
class Chapter:
    """One chapter notebook, read once."""

    path: Path  # chapters/NN_name.ipynb
    number: int
    notebook: nbformat.NotebookNode
    default_module: str | None = None
    # (module, cell index, source without the directive line), in notebook order
    exports: list[tuple[str, int, str]] = field(default_factory=list)
    # (check name, cell index)
    checks: list[tuple[str, int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def rel(self) -> str:
        """chapters/NN_name.ipynb (the full path for a notebook outside the repo)."""
        if self.path.is_relative_to(ROOT):
            return self.path.relative_to(ROOT).as_posix()
        return str(self.path)

    @property
    def title(self) -> str:
        """The text of the notebook's first '# ' heading, or its file name."""
        for cell in self.notebook.cells:
            if cell.cell_type == "markdown":
                for line in cell.source.splitlines():
                    if line.startswith("# "):
                        # "# 03 · Single-head attention" -> "Single-head attention"
                        return re.sub(r"^\d+\s*[·.:-]?\s*", "", line[2:].strip())
        return self.name

    @property
    def is_appendix(self) -> bool:
        """True for an appendix: its title starts with "Appendix" (no exercises, no bridge)."""
        return self.title.startswith("Appendix")

    @property
    def modules(self) -> list[str]:
        """Modules this chapter exports to, default first."""
        seen = [self.default_module] if self.default_module else []
        for module, _, _ in self.exports:
            if module not in seen:
                seen.append(module)
        return seen


def directive(line: str) -> tuple[str, str] | None:
    """('export', 'data') for '#| export data'; None if the line is no directive."""
    match = DIRECTIVE.match(line.strip())
    return (match.group(1), match.group(2) or "") if match else None


def read_chapter(path: Path) -> Chapter:
    """Parse one notebook's directives; raise BookError on a malformed one."""
    match = CHAPTER_NAME.match(path.stem)
    if not match:
        raise BookError(f"{path.name}: chapter files are named NN_name.ipynb (lower case)")
    notebook = nbformat.read(path, as_version=4)
    chapter = Chapter(path=path, number=int(match.group(1)), notebook=notebook)
    pending: list[tuple[str | None, int, str]] = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        for line in lines:
            found = directive(line)
            if found and found[0] == "default_exp":
                if chapter.default_module:
                    raise BookError(f"{chapter.rel}: `#| default_exp` appears more than once")
                chapter.default_module = found[1]
        first = directive(lines[0]) if lines else None
        if first and first[0] == "export":
            pending.append((first[1] or None, index, "\n".join(lines[1:]).strip("\n")))
        elif first and first[0] == "check":
            if not first[1]:
                raise BookError(f"{chapter.rel}, cell {index}: `#| check` needs a name")
            chapter.checks.append((first[1], index))
    for module, index, source in pending:
        module = module or chapter.default_module
        if module is None:
            raise BookError(
                f"{chapter.rel}, cell {index}: `#| export` with no module; "
                "add `#| default_exp MODULE` near the top of the notebook"
            )
        chapter.exports.append((module, index, source))
    return chapter


def read_book(directory: Path = CHAPTERS) -> list[Chapter]:
    """All chapters, in chapter order; two chapters may not share a number."""
    chapters = [read_chapter(p) for p in sorted(directory.glob("*.ipynb"))]
    numbers: dict[int, str] = {}
    for chapter in chapters:
        if chapter.number in numbers:
            raise BookError(f"{numbers[chapter.number]} and {chapter.rel} share number {chapter.number:02d}")
        numbers[chapter.number] = chapter.rel
    return chapters


def solution_regions(source: str) -> list[tuple[int, int]]:
    """(begin, end) line indices of each solution region in a cell, markers included."""
    regions, begin = [], None
    for i, line in enumerate(source.splitlines()):
        if line.strip() == BEGIN_SOLUTION:
            if begin is not None:
                raise BookError("nested `### BEGIN SOLUTION`")
            begin = i
        elif line.strip() == END_SOLUTION:
            if begin is None:
                raise BookError("`### END SOLUTION` without a BEGIN")
            regions.append((begin, i))
            begin = None
    if begin is not None:
        raise BookError("`### BEGIN SOLUTION` without an END")
    return regions
