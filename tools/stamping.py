"""Stamping: each chapter's nbgrader cell metadata and kernelspec, derived from the book's
conventions (tools/notebooks.py: nbgrader_metadata, stamp_notebook), and the teacher's
exercise table (tools/exercise_table.py).

    python -m tools.exercises stamp [CHAPTER ...] [--check]

`stamp` writes them (`stamp_chapter`: a chapter on disk, and its .py pair); `--check`
changes nothing and names each chapter whose metadata is missing or stale
(`stamp_problems`). Used by tools/exercises.py, whose `stamp` command this is.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import jupytext
import nbformat

from tools.exercise_table import TEACHERS_PAGE, page_with_table, table_problems
from tools.notebooks import (
    ROOT,
    BookError,
    Chapter,
    marker_problems,
    read_book,
    read_chapter,
    stamp_notebook,
)
from tools.pairs import pair_text


def stamp_problems(chapter: Chapter) -> list[str]:
    """Why a chapter's nbgrader metadata or kernelspec is not what `stamp` writes."""
    problems = [f"{chapter.rel}, {p}" for p in marker_problems(chapter.notebook)]
    try:
        changes = stamp_notebook(copy.deepcopy(chapter.notebook))
    except BookError as err:
        return problems + [f"{chapter.rel}: {err}"]
    if changes:
        cells = [c for c in changes if c.startswith("cell ")]
        what = []
        if cells:
            what.append(f"{len(cells)} cells lack nbgrader metadata or carry stale metadata "
                        f"(first: {cells[0]})")
        if len(cells) < len(changes):
            kernel = chapter.notebook.metadata.get("kernelspec", {}).get("name")
            what.append(f"the kernelspec names {kernel!r}, not 'python3'")
        problems.append(f"{chapter.rel}: {'; '.join(what)}: run `make sync` "
                        "(python -m tools.exercises stamp), which derives both from the "
                        "chapter's `#| check` cells and solution markers")
    return problems


def stamp_chapter(chapter: Chapter) -> list[str]:
    """Stamp one chapter on disk (and its .py pair's kernelspec); return the changes.

    A .py pair edited after its notebook (a new exercise written in the .py) is synced
    into the notebook first (jupytext --sync, as `make execute` does), so that the new
    cells get their metadata and the pair stays in step; the new cells have no outputs
    until the chapter runs (`make execute NB=...`).
    """
    script = chapter.path.with_suffix(".py")
    if (script.exists() and script.stat().st_mtime > chapter.path.stat().st_mtime
            and pair_text(chapter.path) != script.read_text()):
        subprocess.run([sys.executable, "-m", "jupytext", "--quiet", "--sync", str(script)],
                       check=True)
        print(f"  {script.relative_to(ROOT) if script.is_relative_to(ROOT) else script}: newer "
              "than its notebook, synced into it first (run the chapter before committing: "
              f"make execute NB={script.relative_to(ROOT) if script.is_relative_to(ROOT) else script})")
        chapter = read_chapter(chapter.path)
    in_sync = script.exists() and pair_text(chapter.path) == script.read_text()
    changes = stamp_notebook(chapter.notebook)
    if changes:
        nbformat.write(chapter.notebook, chapter.path)
        if in_sync:  # the kernelspec sits in the pair's header: keep the pair in step
            script.write_text(jupytext.writes(chapter.notebook, fmt="py:percent"))
        elif script.exists():
            print(f"  note: {script.relative_to(ROOT)} was out of sync before stamping, so it "
                  "was left alone: run `make sync`", file=sys.stderr)
    return changes


def stamp(chapters: list[Chapter], check: bool, whole_book: bool) -> int:
    """The `stamp` command: stamp `chapters` (or, with `check`, name each one to stamp)
    and, for the whole book, the teacher's table; exit status 1 if anything was out of sync."""
    problems = []
    for chapter in chapters:
        if check:
            problems += stamp_problems(chapter)
            continue
        problems += [f"{chapter.rel}, {p}" for p in marker_problems(chapter.notebook)]
        changes = stamp_chapter(chapter)
        print(f"{chapter.rel}: " + (f"stamped ({len(changes)} changes)" if changes
                                    else "unchanged"))
    if whole_book:  # the whole book: the teacher's page table too
        if check:
            problems += table_problems(read_book())
        elif TEACHERS_PAGE.exists():
            text = TEACHERS_PAGE.read_text()
            wanted = page_with_table(text, read_book())
            if wanted != text:
                TEACHERS_PAGE.write_text(wanted)
                print(f"{TEACHERS_PAGE.relative_to(ROOT)}: exercise table updated")
    for problem in problems:
        print(f"out of sync: {problem}", file=sys.stderr)
    return 1 if problems else 0
