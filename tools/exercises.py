"""Exercises: student copies, grading, a student's self-check, and the proof that checks fail.

    python -m tools.exercises student [CHAPTER ...] [--out student] [--force]
        write student copies: each solution region becomes `raise NotImplementedError`,
        hidden tests are removed, outputs cleared, the chapter's cells locked as nbgrader
        locks them; a copy that a student has edited is never overwritten without --force
    python -m tools.exercises grade PATH ... [--out graded] [--force] [--roster CSV]
                                             [--jobs N] [--timeout S]
        grade returned notebooks (files, or folders searched for *.ipynb; any file
        names: the chapter is recognised from the notebook itself), each in its own
        fresh kernel and empty working folder, N at a time, with the chapter's own checks
        (hidden tests included) and locked cells (so an edited check cannot pass), under
        the grading guard and barrier (tools/grading_guard.py, grading_barrier.py: the
        notebook cannot patch the checks' references or read the teacher's files); the
        students from the roster or the folders (tools/gradebook.py); write
        OUT/gradebook.csv (one row per exercise), OUT/summary.csv (one row per student)
        and OUT/feedback/STUDENT.md; refuse an OUT that holds a gradebook unless --force;
        exit 1 if a notebook could not be graded (unrecognised, unreadable, crashed)
    python -m tools.exercises check NOTEBOOK
        a student's self-check: run the notebook as grading does (hidden tests included)
        and print passed/failed per exercise with the message; exit 0 if all pass
    python -m tools.exercises verify [CHAPTER ...] [-v] [--jobs N]
        for each chapter: at least four exercises, each check followed by hidden tests;
        every check passed in the committed (nbval-verified) notebook; and, in one fresh
        run of the chapter under the grading guard and barrier, every check passes on the
        solution (also without its hidden tests), compares only against references the
        guard restores, and fails on the student stub and on each recorded near-miss
        answer (tests/near_misses/NN_name.py)
    python -m tools.exercises stamp [CHAPTER ...] [--check]
        write each chapter's nbgrader cell metadata and kernelspec, derived from the
        book's conventions (tools/notebooks.py: nbgrader_metadata); --check changes
        nothing and names each chapter whose metadata is missing or stale
    python -m tools.exercises course DIR [CHAPTER ...]
        lay out an nbgrader course: DIR/nbgrader_config.py and DIR/source/NN_name/

An exercise is a code cell with a `### BEGIN SOLUTION` ... `### END SOLUTION`
region, followed by a code cell whose first line is `#| check NAME [points=N]`, or a
written answer: a markdown cell whose first line is `<!-- #| answer NAME points=N -->`
(graded by hand).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import runpy
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import jupytext
import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from tools import exercise_proof, gradebook, grading_guard, nbgrader_course
from tools.execute import default_jobs, notebook_client
from tools.exercise_cells import (
    META_KEY,
    check_name,
    error_of,
    in_student_terms,
    stderr_of,
    strip_solutions,
)
from tools.notebooks import (
    ANSWER_STUB,
    CHAPTERS,
    PACKAGE,
    ROOT,
    BookError,
    Chapter,
    answer_directive,
    hidden_test_regions,
    marker_problems,
    nbgrader_metadata,
    read_book,
    read_chapter,
    solution_regions,
    stamp_notebook,
    stored_seconds,
    strip_hidden_tests,
)
from tools.pairs import pair_text

MIN_EXERCISES = 4
MIN_NEAR_MISSES = 2
NEAR_MISSES = ROOT / "tests" / "near_misses"


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


# --- student copies -------------------------------------------------------------

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


# --- grading --------------------------------------------------------------------

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
        chapter, why = gradebook.recognise(notebook, read_book())
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


# --- nbgrader metadata ----------------------------------------------------------

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
        problems.append(f"{chapter.rel}: {'; '.join(what)}: run `make stamp` "
                        "(python -m tools.exercises stamp), which derives both from the "
                        "chapter's `#| check` cells and solution markers")
    return problems


TEACHERS_PAGE = ROOT / "book" / "teachers.md"
TABLE_BEGIN = "<!-- exercise table: written by `make stamp` from the chapters' checks; do not edit -->"
TABLE_END = "<!-- end of the exercise table -->"
EXERCISE_HEADING = re.compile(r"^#{2,4}\s*Exercise\s*(\d+)\s*[·.:-]?\s*(.*)$")


def exercises_of(chapter: Chapter) -> list[tuple[str, str, float]]:
    """(title, name, points) per exercise, in notebook order: each check, and each written
    answer (its name then reads `NAME (by hand)`); the title from its `### Exercise N · ...`.
    An exercise with a check and a written answer has one row for each."""
    found, heading = [], None
    for cell in chapter.notebook.cells:
        if cell.cell_type == "markdown":
            try:
                answer = answer_directive(cell.source)
            except BookError:
                answer = None
            if answer is not None:
                found.append((heading or answer[0], f"{answer[0]} (by hand)", answer[1]))
                continue
            for line in cell.source.splitlines():
                if (match := EXERCISE_HEADING.match(line.strip())) is not None:
                    heading = f"{match.group(1)} · {match.group(2).strip()}".strip(" ·")
        elif (name := check_name(cell)) is not None:
            found.append((heading or name, name, chapter.points.get(name, 1)))
    return found


def exercise_table(chapters: list[Chapter]) -> str:
    """The teacher's page table: every exercise of every chapter with its points."""
    lines = ["| Chapter | Exercise | Check (nbgrader `grade_id`) | Points |",
             "|---|---|---|---|"]
    total = 0.0
    for chapter in chapters:
        rows = exercises_of(chapter)
        points = sum(p for _, _, p in rows)
        total += points
        for i, (title, name, p) in enumerate(rows):
            short = chapter.title.split(":")[0]
            where = (f"{{doc}}`{chapter.number:02d} · {short} </chapters/{chapter.name}>` "
                     f"({points:g} points)" if i == 0 else "")
            grade_id = f"`{name.removesuffix(' (by hand)')}`" + (
                " (written, graded by hand)" if name.endswith("(by hand)") else "")
            lines.append(f"| {where} | {title} | {grade_id} | {p:g} |")
    count = sum(len({title for title, _, _ in exercises_of(chapter)}) for chapter in chapters)
    with_exercises = sum(1 for chapter in chapters if chapter.checks)
    lines.append(f"| **{with_exercises} chapters** | **{count} exercises** | | **{total:g}** |")
    return "\n".join(lines)


def page_with_table(text: str, chapters: list[Chapter]) -> str:
    """The teacher's page with its exercise table brought up to date."""
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise BookError(f"{TEACHERS_PAGE.relative_to(ROOT)} lost its exercise-table markers "
                        f"({TABLE_BEGIN!r} ... {TABLE_END!r})")
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{exercise_table(chapters)}\n{TABLE_END}{tail}"


def table_problems(chapters: list[Chapter]) -> list[str]:
    if not TEACHERS_PAGE.exists():
        return [f"{TEACHERS_PAGE.relative_to(ROOT)} is missing (the teacher's page)"]
    text = TEACHERS_PAGE.read_text()
    try:
        wanted = page_with_table(text, chapters)
    except BookError as err:
        return [str(err)]
    if wanted != text:
        return [f"{TEACHERS_PAGE.relative_to(ROOT)}: the table of exercises and points differs "
                "from the chapters' checks: run `make stamp`"]
    return []


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


# --- verification ---------------------------------------------------------------

def structure_problems(chapter: Chapter) -> list[str]:
    """Exercise layout rules that need no execution."""
    problems = []
    names = [name for name, _ in chapter.checks]
    if len(set(names)) != len(names):
        problems.append(f"check names repeat: {names}")
    exported = {index for _, index, _ in chapter.exports}
    pending = None  # index of a solution cell still waiting for its check
    solutions = 0
    for index, cell in enumerate(chapter.notebook.cells):
        if cell.cell_type != "code":
            continue
        try:
            regions = solution_regions(cell.source)
        except BookError as err:
            problems.append(f"cell {index}: {err}")
            continue
        if regions:
            if index in exported:
                problems.append(f"cell {index}: a solution region inside an `#| export` cell")
            if pending is not None:
                problems.append(f"cell {pending}: solution with no `#| check` cell after it")
            pending = index
            solutions += 1
        elif check_name(cell):
            pending = None
    if pending is not None:
        problems.append(f"cell {pending}: solution with no `#| check` cell after it")
    count = len({title for title, _, _ in exercises_of(chapter)})
    if count < MIN_EXERCISES and not chapter.is_appendix:  # appendices need none
        problems.append(f"{count} exercises; a chapter needs at least {MIN_EXERCISES}")
    for name, index in chapter.answers:
        if not answer_text(chapter.notebook.cells[index]):
            problems.append(f"written answer `{name}` has no model answer below its "
                            "`<!-- #| answer -->` line (the teacher's reference when grading)")
    for name, index in chapter.checks:
        cell = chapter.notebook.cells[index]
        if not hidden_test_regions(cell.source):
            problems.append(f"check `{name}` has no hidden tests: put the cases that the "
                            "visible part does not show between `### BEGIN HIDDEN TESTS` and "
                            "`### END HIDDEN TESTS`, so that an answer fitted to the visible "
                            "messages fails")
        if cell.get("execution_count") is None:
            problems.append(f"check `{name}` was not executed in the committed notebook")
        elif (error := error_of(cell)) is not None:
            problems.append(f"check `{name}` fails on the solution: {error}")
        elif (line := stderr_of(cell)) is not None:
            problems.append(f"check `{name}` writes to stderr on the solution ({line!r}), which "
                            "nbgrader grades as a failure: silence it or move it out of the check")
    return problems


def near_misses(chapter: Chapter) -> dict[str, dict[str, str]]:
    """{check name: {what the mistake is: solution cell source}} from tests/near_misses/."""
    path = NEAR_MISSES / f"{chapter.name}.py"
    if not path.exists():
        return {}
    answers = runpy.run_path(str(path)).get("NEAR_MISSES")
    if not isinstance(answers, dict) or not all(
            isinstance(name, str) and isinstance(by_label, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in by_label.items())
            for name, by_label in answers.items()):
        raise BookError(f"{path.relative_to(ROOT)}: NEAR_MISSES must map each check name to "
                        "{description: solution cell source}")
    return {name: {label: textwrap.dedent(source).strip("\n") for label, source in by_label.items()}
            for name, by_label in answers.items()}


def verified(chapters: list[Chapter], verbose: bool = False,
             jobs: int = 1) -> Iterator[tuple[Chapter, list[str]]]:
    """(chapter, its problems) for each chapter, in order; `jobs` chapters run at once
    (each in a kernel of its own), except in verbose mode, whose output would interleave."""
    if verbose or jobs <= 1 or len(chapters) <= 1:
        for chapter in chapters:
            if verbose:
                print(f"{chapter.rel}:", flush=True)
            yield chapter, verify(chapter, verbose=verbose)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        # Longest first (by the run time the committed cells record), so that the
        # slowest chapter does not start last and run alone.
        longest_first = sorted(chapters, key=lambda c: stored_seconds(c.notebook), reverse=True)
        futures = {chapter.rel: pool.submit(verify, chapter) for chapter in longest_first}
        for chapter in chapters:
            yield chapter, futures[chapter.rel].result()


def answer_problems(chapter: Chapter, answers: dict[str, dict[str, str]]) -> list[str]:
    """The near-miss answers on record: each names a check, and each check has enough."""
    problems = []
    names = [name for name, _ in chapter.checks]
    for unknown in sorted(set(answers) - set(names)):
        problems.append(f"{NEAR_MISSES.name}/{chapter.name}.py names `{unknown}`, "
                        f"which is no check of this chapter (checks: {', '.join(names)})")
    for name in names:
        if len(answers.get(name, {})) < MIN_NEAR_MISSES:
            problems.append(f"check `{name}` has {len(answers.get(name, {}))} near-miss answers in "
                            f"tests/near_misses/{chapter.name}.py; each exercise needs "
                            f"{MIN_NEAR_MISSES} (mistakes students really make)")
    return problems


def verify(chapter: Chapter, verbose: bool = False,
           answers: dict[str, dict[str, str]] | None = None) -> list[str]:
    """All problems with a chapter's exercises; empty when they are sound.

    One fresh run of the chapter, under the grading guard and barrier and in an empty
    working folder, as in grading. After each check has passed on the solution, the
    check's references are checked to be ones the guard restores, the check as a
    student copy shows it (hidden tests left out) must pass too, then the solution cell
    is replaced in turn by the student stub and by each recorded near-miss answer (the
    names the solution defines are deleted first, so that a wrong answer cannot pass on
    what the solution left behind) and the whole check must fail on each; then the
    solution runs again and its check must pass again. The proof runs in the chapter's kernel, in a cell inserted
    after each check (tools/exercise_proof.py); `make test` runs the same cells inside
    nbgrader's grading of the chapter.
    """
    problems = structure_problems(chapter)
    if problems or not chapter.checks:  # an appendix without exercises: nothing to run
        return problems
    answers = near_misses(chapter) if answers is None else answers
    problems += answer_problems(chapter, answers)
    notebook = exercise_proof.with_proof_cells(chapter.notebook, chapter, answers)
    client = notebook_client(notebook, allow_errors=True)
    # Checks run under the grading guard and barrier, in an empty working folder, as in
    # grading: proof that they let every solution through while the wrong answers fail.
    shielded, allowed = barrier_folders(chapter)
    client.extra_arguments = grading_guard.kernel_arguments(protect=shielded, allow=allowed)
    with tempfile.TemporaryDirectory(prefix="transformer-book-verify-") as workdir:
        client.execute(cwd=workdir)
    return problems + exercise_proof.proof_problems(notebook, chapter, verbose)


# --- command line ---------------------------------------------------------------

def chapter_for(student_path: Path, explicit: Path | None) -> Chapter:
    """The chapter a notebook belongs to: --chapter, else recognised from its content."""
    if explicit is not None:
        return read_chapter(explicit.resolve().with_suffix(".ipynb"))
    chapter, why = gradebook.recognise(nbformat.read(student_path, as_version=4), read_book())
    if chapter is None:
        raise BookError(f"{student_path}: {why}; name the chapter with --chapter")
    return chapter


def selected(paths: list[Path]) -> list[Chapter]:
    if not paths:
        return read_book()
    return [read_chapter(p.resolve().with_suffix(".ipynb")) for p in paths]


def with_exercises(chapters: list[Chapter]) -> list[Chapter]:
    """The chapters that have exercises (an appendix has none: nothing to hand out)."""
    return [chapter for chapter in chapters if chapter.checks]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="write student copies")
    student.add_argument("chapters", nargs="*", type=Path)
    student.add_argument("--out", type=Path, default=ROOT / "student")
    student.add_argument("--force", action="store_true",
                         help="overwrite copies that a student has edited")
    grader = commands.add_parser("grade", help="grade returned notebooks into a gradebook")
    grader.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="returned notebooks, or folders to search for *.ipynb")
    grader.add_argument("--chapter", type=Path, help="grade every notebook against this chapter")
    grader.add_argument("--jobs", "-j", type=int, default=None,
                        help="notebooks graded at once (default: the machine's cores)")
    grader.add_argument("--out", type=Path, default=ROOT / "graded",
                        help="folder for gradebook.csv, summary.csv and feedback/ (default "
                             "graded/); one that holds a gradebook is refused without --force")
    grader.add_argument("--force", action="store_true",
                        help="replace the gradebook that OUT already holds")
    grader.add_argument("--roster", type=Path,
                        help="CSV with a `student` column (the ids to write) and columns of "
                             "names, e-mails or file names that identify each student's files")
    grader.add_argument("--timeout", type=int, default=1200,
                        help="seconds one notebook may run (default 1200)")
    grader.add_argument("--json", action="store_true", help="also print every row as JSON")
    grader.add_argument("--book", type=Path, default=CHAPTERS, help=argparse.SUPPRESS)
    one = commands.add_parser("grade-one", help=argparse.SUPPRESS)
    one.add_argument("notebook", type=Path)
    one.add_argument("--chapter", type=Path)
    one.add_argument("--timeout", type=int, default=1200)
    one.add_argument("--protect", type=Path, action="append", default=[])
    checker = commands.add_parser("check", help="a student's self-check of one notebook")
    checker.add_argument("notebook", type=Path)
    checker.add_argument("--chapter", type=Path)
    verifier = commands.add_parser("verify", help="prove every check can fail")
    verifier.add_argument("chapters", nargs="*", type=Path)
    verifier.add_argument("-v", "--verbose", action="store_true",
                          help="print each wrong answer's failure message (one chapter at a time)")
    verifier.add_argument("--jobs", "-j", type=int,
                          default=default_jobs(),
                          help="chapters verified at the same time (default: $JOBS, or the cores)")
    stamper = commands.add_parser("stamp", help="write nbgrader metadata into the chapters")
    stamper.add_argument("chapters", nargs="*", type=Path)
    stamper.add_argument("--check", action="store_true",
                         help="change nothing; exit 1 naming each chapter to stamp")
    course = commands.add_parser("course", help="lay out an nbgrader course")
    course.add_argument("directory", type=Path)
    course.add_argument("chapters", nargs="*", type=Path)
    args = parser.parse_args(argv)

    try:
        if args.command == "student":
            return write_student_copies(with_exercises(selected(args.chapters)), args.out,
                                        args.force)
        if args.command == "grade":
            return gradebook.main(args)
        if args.command == "grade-one":
            print(json.dumps(grade_file(args.notebook, args.chapter, args.timeout,
                                        args.protect), ensure_ascii=False))
            return 0
        if args.command == "check":
            chapter = chapter_for(args.notebook, args.chapter)
            print(f"running {args.notebook} with the checks of {chapter.rel}, each with its "
                  "hidden tests, as grading runs them ...", flush=True)
            results = grade(nbformat.read(args.notebook, as_version=4), chapter)
            print(report(results, f"{args.notebook} (chapter {chapter.number:02d} · "
                                  f"{chapter.title})"))
            return 0 if all(r.passed for r in results) else 1
        if args.command == "stamp":
            problems = []
            for chapter in selected(args.chapters):
                if args.check:
                    problems += stamp_problems(chapter)
                    continue
                problems += [f"{chapter.rel}, {p}" for p in marker_problems(chapter.notebook)]
                changes = stamp_chapter(chapter)
                print(f"{chapter.rel}: " + (f"stamped ({len(changes)} changes)" if changes
                                            else "unchanged"))
            if not args.chapters:  # the whole book: the teacher's page table too
                if args.check:
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
        if args.command == "course":
            return nbgrader_course.write_course(args.directory,
                                                with_exercises(selected(args.chapters)))
        proven, failures, without = 0, 0, 0
        for chapter, problems in verified(selected(args.chapters), args.verbose, args.jobs):
            status = "ok" if not problems else "PROBLEMS"
            if not chapter.checks and not problems:
                status = "no exercises (an appendix), nothing to prove"
            answers = sum(len(v) for v in near_misses(chapter).values())
            print(f"{chapter.rel}: {len(chapter.checks)} checks, {answers} near-miss answers, "
                  f"{status}", flush=True)
            for problem in problems:
                print(f"  - {problem}")
            failures += bool(problems)
            without += not chapter.checks and not problems
            proven += 0 if problems or not chapter.checks else 1
        print(f"chapters whose checks pass on the solution and fail on the stub and on "
              f"every near-miss answer: {proven} passed, {failures} failed"
              + (f" ({without} without exercises)" if without else ""))
        return 1 if failures else 0
    except BookError as err:
        print(f"exercises: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
