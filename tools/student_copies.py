"""Student copies of the chapters: `python -m tools.exercises student` (`make student`).

A student copy is a chapter with each solution region stubbed out (`raise
NotImplementedError`), each written answer's model answer replaced by the stub, hidden
tests removed, outputs cleared and cells locked as nbgrader's release locks them
(`student_copy`). It records the chapter and a hash of its cells, by which
`write_student_copies` tells a copy nobody touched (brought up to date) from one a
student has edited (kept, unless forced).

Used by tools/exercises.py (the `student` command), the website's student edition and
download button (tools/website.py) and tools/class_sample.py.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import nbformat

from tools.exercise_cells import META_KEY, strip_solutions
from tools.notebooks import ANSWER_STUB, ROOT, Chapter, answer_directive, strip_hidden_tests


def content_hash(notebook: nbformat.NotebookNode) -> str:
    """A digest of what a student edits: each cell's type and source (not outputs)."""
    cells = [[cell.cell_type, cell.source] for cell in notebook.cells]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode()).hexdigest()


def student_copy(notebook: nbformat.NotebookNode, chapter: str | None = None
                 ) -> nbformat.NotebookNode:
    """A copy with solutions stubbed out, hidden tests removed and all outputs cleared.

    The one function that makes a student's edition of a chapter (`make student`, the
    student edition of the website). Each solution region becomes `raise
    NotImplementedError`; each written answer's model answer becomes `YOUR ANSWER HERE`
    (its `<!-- #| answer NAME -->` line stays, so that grading finds it). Cells are
    locked as nbgrader's release locks them: checks and the chapter's other code cells
    read-only, no code cell deletable (grading restores them anyway). The notebook's
    metadata records the chapter and a hash of the copy's cells, by which `student`
    later tells an untouched copy from an edited one.
    """
    student = copy.deepcopy(notebook)
    for cell in student.cells:
        if cell.cell_type == "markdown" and answer_directive(cell.source):
            cell.source = cell.source.splitlines()[0] + "\n" + ANSWER_STUB
            cell.metadata["deletable"] = False
            continue
        if cell.cell_type != "code":
            continue
        cell.source = strip_hidden_tests(strip_solutions(cell.source))
        cell.outputs = []
        cell.execution_count = None
        meta = cell.metadata.get("nbgrader")
        if meta:
            cell.metadata["deletable"] = False
            if meta.get("locked"):
                cell.metadata["editable"] = False
    student.metadata.pop("jupytext", None)  # no .py pair appears beside a student's copy
    student.metadata[META_KEY] = {"chapter": chapter} if chapter else {}
    student.metadata[META_KEY]["student_copy"] = content_hash(student)
    return student


def is_edited(existing: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> bool:
    """Whether a copy on disk holds work: its cells differ from both what `student`
    wrote into it (the hash it carries) and what `student` would write now."""
    recorded = existing.metadata.get(META_KEY, {}).get("student_copy")
    current = content_hash(existing)
    return current not in (recorded, content_hash(fresh))


def write_student_copies(chapters: list[Chapter], out: Path, force: bool = False) -> int:
    """Write student copies into `out`; refuse (exit 1) to overwrite an edited one."""
    out.mkdir(parents=True, exist_ok=True)
    refused = []
    for chapter in chapters:
        target = out / chapter.path.name
        fresh = student_copy(chapter.notebook, chapter.name)
        shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
        if target.exists():
            existing = nbformat.read(target, as_version=4)
            if nbformat.writes(existing) == nbformat.writes(fresh):
                print(f"unchanged {shown}")
                continue
            if is_edited(existing, fresh) and not force:
                refused.append(shown)
                print(f"KEPT {shown}: it has been edited since `make student` wrote it")
                continue
        nbformat.write(fresh, target)
        print(f"wrote {shown} ({len(chapter.checks)} exercises)")
    if refused:
        print(f"{len(refused)} edited student copies were kept. To overwrite them (the work "
              "in them is lost), run `make student FORCE=1` "
              "(python -m tools.exercises student --force).", file=sys.stderr)
        return 1
    return 0
