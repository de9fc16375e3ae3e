"""Grading one returned notebook against its chapter, as nbgrader's autograde does.

The chapter's checks and locked cells are put back into the student's notebook
(`graded_notebook`), which runs in a fresh kernel and an empty working folder under the
grading guard and barrier (tools/grading_guard.py, grading_barrier.py: the notebook
cannot patch the checks' references or read the teacher's files); each exercise gets a
`Result` (`grade`). A written answer is not run: its text is returned for the teacher.

Used by tools/exercises.py (`check`, and `grade-one`: `grade_file`, the child process
that tools/gradebook.py starts for each notebook of a class) and by
tools/exercise_verify.py (the barrier's folders, a written answer's text).
"""

from __future__ import annotations

import copy
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from tools import grading_guard
from tools.execute import notebook_client
from tools.exercise_cells import check_name, error_of, in_student_terms
from tools.notebooks import (
    ANSWER_STUB,
    PACKAGE,
    ROOT,
    BookError,
    Chapter,
    answer_directive,
    nbgrader_metadata,
    read_book,
    read_chapter,
    strip_hidden_tests,
)
from tools.returned_notebooks import recognise


@dataclass
class Result:
    """How one exercise of one notebook did. A written answer (`manual`) is not passed or
    failed here: `answer` holds the student's text for the teacher to grade."""

    name: str
    passed: bool
    detail: str = ""
    points: float = 0
    max_points: float = 1
    manual: bool = False
    answer: str = ""


def graded_notebook(student: nbformat.NotebookNode, chapter: Chapter,
                    hidden_tests: bool = True) -> tuple[nbformat.NotebookNode, set[str]]:
    """The notebook to run: the student's, with the chapter's checks and locked cells.

    As nbgrader's autograde does, every locked cell of the chapter (matched by its
    nbgrader grade_id, or a check by its `#| check NAME` line) gets the chapter's
    source back; solution cells and cells the student added stay as they are.
    Returns the notebook and the names of the checks found in it.
    """
    checks = {name: chapter.notebook.cells[i].source for name, i in chapter.checks}
    if not hidden_tests:
        checks = {name: strip_hidden_tests(source) for name, source in checks.items()}
    locked = {}
    for cell, meta in zip(chapter.notebook.cells, nbgrader_metadata(chapter.notebook),
                          strict=True):
        if meta and meta["locked"] and not meta["grade"]:
            locked[meta["grade_id"]] = cell.source
    notebook = copy.deepcopy(student)
    present = set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        grade_id = (cell.metadata.get("nbgrader") or {}).get("grade_id")
        name = grade_id if grade_id in checks else check_name(cell)
        if name in checks:
            cell.source = checks[name]  # the teacher's check, not the student's copy of it
            present.add(name)
        elif grade_id in locked:
            cell.source = locked[grade_id]
    return notebook, present


def barrier_folders(chapter: Chapter, extra: list[Path] = ()) -> tuple[list[str], list[str]]:
    """(protect, allow) for the grading barrier (tools/grading_barrier.py): the notebook
    may not read the repository (its chapters hold the solutions), the folder of the
    chapter it is graded against, nor `extra` (the returned notebooks, the gradebook);
    it may read the package and its data (checkpoints, corpora, configs)."""
    protect = [ROOT, chapter.path.parent, *extra]
    return [str(p) for p in protect], [str(PACKAGE)]


def answer_text(cell: nbformat.NotebookNode) -> str:
    """A written answer as the student left it: without its directive line or the stub."""
    lines = cell.source.splitlines()
    if lines and answer_directive(lines[0].strip()) is not None:
        lines = lines[1:]
    text = "\n".join(lines).strip()
    return "" if text in ("", ANSWER_STUB) else text


def answer_cells(notebook: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    """{answer name: cell} of a student's notebook: by nbgrader grade_id, else by its line."""
    found = {}
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        meta = cell.metadata.get("nbgrader") or {}
        if meta.get("grade") and meta.get("solution") and meta.get("grade_id"):
            found.setdefault(meta["grade_id"], cell)
            continue
        try:
            directive = answer_directive(cell.source)
        except BookError:
            directive = None
        if directive is not None:
            found.setdefault(directive[0], cell)
    return found


def grade(student: nbformat.NotebookNode, chapter: Chapter, *, timeout: int = 600,
          hidden_tests: bool = True, guard: bool = True,
          protect: list[Path] = ()) -> list[Result]:
    """Run a student's notebook with the chapter's checks; one Result per exercise.

    The notebook runs in a fresh kernel whose working folder is a new empty temporary
    one, under the grading guard and barrier (`protect`: more folders it may not read,
    besides the repository and the chapter's folder). A check fails when its cell shows
    an error or when the kernel answers that it ended in one (an exception handler may
    have hidden the message, as nbgrader also counts it). Written answers are not run:
    their text is returned for the teacher. `guard=False` leaves the guard and the
    barrier out (for tests that show what they stop).
    """
    notebook, present = graded_notebook(student, chapter, hidden_tests)
    failed_replies, stopped = run_graded(notebook, chapter, timeout, guard, protect)
    return (check_results(notebook, chapter, present, failed_replies, stopped)
            + answer_results(student, chapter))


def run_graded(notebook: nbformat.NotebookNode, chapter: Chapter, timeout: int, guard: bool,
               protect: list[Path]) -> tuple[dict[int, str], str | None]:
    """Run the notebook to grade, in place (`grade`); return ({cell index: the error the
    kernel reported for it}, why the run stopped before its end, or None)."""
    client = notebook_client(notebook, allow_errors=True, timeout=timeout)
    if guard:
        shielded, allowed = barrier_folders(chapter, list(protect))
        client.extra_arguments = grading_guard.kernel_arguments(protect=shielded, allow=allowed)
    failed_replies: dict[int, str] = {}

    def on_error(cell, cell_index, execute_reply):
        content = execute_reply.get("content", {})
        failed_replies[cell_index] = f"{content.get('ename')}: {content.get('evalue')}"

    client.on_cell_error = on_error
    stopped = None
    with tempfile.TemporaryDirectory(prefix="transformer-book-grading-") as workdir:
        client.resources = {"metadata": {"path": workdir}}
        try:
            client.execute()
        except CellTimeoutError:
            stopped = f"the notebook ran past the {timeout} s limit of a cell before this check"
        except DeadKernelError:
            stopped = "the kernel died (out of memory, or the notebook ended its process) " \
                      "before this check ran"
    return failed_replies, stopped


def check_results(notebook: nbformat.NotebookNode, chapter: Chapter, present: set[str],
                  failed_replies: dict[int, str], stopped: str | None) -> list[Result]:
    """A Result per check of the chapter, from the run of the graded notebook."""
    results = []
    indices = {check_name(c): i for i, c in enumerate(notebook.cells) if check_name(c)}
    for name, _ in chapter.checks:
        index = indices.get(name)
        cell = notebook.cells[index] if index is not None else None
        points = chapter.points.get(name, 1)
        if name not in present or cell is None:
            results.append(Result(name, False, "check cell missing from the notebook", 0, points))
        elif cell.get("execution_count") is None:
            results.append(Result(name, False, stopped or "check cell did not run", 0, points))
        elif (error := error_of(cell)) is not None:
            results.append(Result(name, False, error, 0, points))
        elif index in failed_replies:
            results.append(Result(name, False, f"{failed_replies[index]} (the kernel reported "
                                  "an error that the notebook's output does not show: was "
                                  "an exception handler installed?)", 0, points))
        else:
            results.append(Result(name, True, "", points, points))
    return results


def answer_results(student: nbformat.NotebookNode, chapter: Chapter) -> list[Result]:
    """A Result per written answer of the chapter: its text, for the teacher to grade."""
    results = []
    written = answer_cells(student)
    for name, _ in chapter.answers:
        points = chapter.points.get(name, 1)
        cell = written.get(name)
        if cell is None:
            results.append(Result(name, False, "answer cell missing from the notebook", 0,
                                  points, manual=True))
        elif not (text := answer_text(cell)):
            results.append(Result(name, False, "not answered", 0, points, manual=True))
        else:
            results.append(Result(name, False, "to grade by hand", 0, points, manual=True,
                                  answer=text))
    return results


def grade_file(path: Path, chapter_path: Path | None, timeout: int,
               protect: list[Path] = ()) -> dict:
    """Grade one notebook; a dict that says what happened, for JSON (`grade-one`: the
    child process of tools/gradebook.py's run_worker, with the notebook's own kernel)."""
    start = time.perf_counter()
    outcome = {"file": str(path), "chapter": None, "results": [], "error": None}
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported, not raised
        outcome["error"] = f"not a readable notebook: {type(err).__name__}: {err}"
        return outcome
    if chapter_path is not None:
        chapter = read_chapter(chapter_path.resolve().with_suffix(".ipynb"))
    else:
        chapter, why = recognise(notebook, read_book())
        if chapter is None:
            outcome["error"] = why
            return outcome
    outcome["chapter"] = chapter.name
    results = grade(notebook, chapter, timeout=timeout, protect=list(protect))
    outcome["results"] = [asdict(r) for r in results]
    outcome["seconds"] = round(time.perf_counter() - start, 1)
    return outcome


def status_of(result: Result) -> str:
    """passed, FAILED, or for a written answer: written (to grade by hand) / not answered."""
    if result.manual:
        return "written" if result.answer else "not answered"
    return "passed" if result.passed else "FAILED"


def report(results: list[Result], title: str) -> str:
    lines = [title]
    for r in results:
        if r.manual:
            lines.append(f"  {status_of(r):<7} {r.name}  (a written answer, graded by hand: "
                         f"{r.max_points:g} points)")
            continue
        lines.append(f"  {status_of(r):<7} {r.name}"
                     + (f"  ({in_student_terms(r.detail)})" if r.detail else ""))
    checked = [r for r in results if not r.manual]
    passed = sum(r.passed for r in checked)
    points = sum(r.points for r in checked)
    total = sum(r.max_points for r in checked)
    lines.append(f"  {passed} of {len(checked)} checked exercises passed ({points:g} of "
                 f"{total:g} points)")
    by_hand = sum(r.max_points for r in results if r.manual)
    if by_hand:
        lines.append(f"  and {by_hand:g} points of written answers, graded by hand")
    return "\n".join(lines)
