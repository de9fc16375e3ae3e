"""Real nbgrader, end to end, on every chapter: what a teacher runs, with three students.

A throw-away course is laid out by `tools/exercises.py course` (as the teacher's page
says), nbgrader 0.9.6 from this environment (its bin/ first on PATH, as for a teacher
with the environment active) releases every chapter, then autogrades three simulated
students, writes their feedback and exports the grades:

- `solved`: each solution cell holds the chapter's solution (without the markers);
- `untouched`: the released notebook as it was handed out;
- `print_passed`: every check cell rewritten to `print('passed')`.

The solved student hands in every chapter that has exercises (appendices have none) and
must score full marks in each, so that a chapter added later is covered without editing
this file: nbgrader runs every chapter to the end in its own kernel, under its own time
limit per cell and with the grading guard of the course's nbgrader_config.py. The other
two must score 0. They hand in one real chapter, the quickest to run, because what they
test is nbgrader's machinery, the same in every chapter (the released stub raises, and
autograde puts the locked check cells back before it runs them); that every check of
every chapter fails on the stub and on recorded wrong answers is proven, chapter by
chapter, by `tools/exercises.py verify` (`make exercises`), whose stub raises
NotImplementedError as nbgrader's does.
Grading all three students in every chapter took three executions of the whole book
(about 12 of `make test`'s 25 minutes on two cores) and added no check that these two
parts do not make.

Time: the chapters are split into as many independent courses as the machine has cores
(balanced by each chapter's run time recorded in its cell metadata), and the courses run
side by side.

Another, small course checks that nbgrader's grading is not fooled by a solution that
rebinds `torch.allclose` and friends (the grading guard in nbgrader's kernel).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from notebooks import BEGIN_SOLUTION, END_SOLUTION, read_book, stored_seconds  # noqa: E402
from toy_chapter import CHEATS, toy_chapter  # noqa: E402

pytestmark = pytest.mark.nbgrader

BIN = Path(sys.executable).parent  # the environment's bin/: nbgrader, alembic, python
STUDENTS = ("solved", "untouched", "print_passed")


def environment() -> dict[str, str]:
    """What a teacher's shell has with the project's environment active."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "OMP_NUM_THREADS": "1"}


def nbgrader(course: Path, *args: str, timeout: int = 3600) -> str:
    run = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=environment(),
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return run.stdout + run.stderr


def shards(chapters, count: int):
    """Split chapters into `count` groups of about equal run time (longest first)."""
    groups: list[list] = [[] for _ in range(count)]
    loads = [0.0] * count
    for chapter in sorted(chapters, key=lambda c: stored_seconds(c.notebook), reverse=True):
        emptiest = loads.index(min(loads))
        groups[emptiest].append(chapter)
        loads[emptiest] += max(stored_seconds(chapter.notebook), 1.0)
    return [g for g in groups if g]


def without_markers(source: str) -> str:
    """A solution as a student would type it: the region's content, no marker lines."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))


def submission(released: nbformat.NotebookNode, chapter, student: str) -> nbformat.NotebookNode:
    """The notebook `student` hands back for `chapter`."""
    notebook = nbformat.from_dict(released)
    solutions = {cell.metadata["nbgrader"]["grade_id"]: cell.source
                 for cell in chapter.notebook.cells
                 if cell.metadata.get("nbgrader", {}).get("solution")}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if student == "solved" and meta.get("solution"):
            cell.source = without_markers(solutions[meta["grade_id"]])
        elif student == "print_passed" and meta.get("grade"):
            cell.source = "print('passed')"
    return notebook


def run_course(course: Path, chapters, students=STUDENTS, make_submission=submission) -> dict:
    """Lay out a course for `chapters`, release, submit, autograde, feedback, export.

    `students` is a tuple of student names, or a function of a chapter that gives the
    names of the students who hand that chapter in.
    Returns {(chapter name, student): (score, max score)} from nbgrader's grades.csv.
    """
    students_of = students if callable(students) else (lambda chapter: students)
    subprocess.run([sys.executable, str(ROOT / "tools" / "exercises.py"), "course", str(course),
                    *[str(c.path) for c in chapters]], check=True, capture_output=True)
    nbgrader(course, "generate_assignment", "*")
    for chapter in chapters:
        released = nbformat.read(course / "release" / chapter.name / chapter.path.name,
                                 as_version=4)
        text = nbformat.writes(released)
        assert BEGIN_SOLUTION not in text and "BEGIN HIDDEN TESTS" not in text, chapter.name
        for student in students_of(chapter):
            folder = course / "submitted" / student / chapter.name
            folder.mkdir(parents=True)
            nbformat.write(make_submission(released, chapter, student), folder / chapter.path.name)
    nbgrader(course, "autograde", "*")
    nbgrader(course, "generate_feedback", "*")
    for chapter in chapters:
        for student in students_of(chapter):
            assert (course / "feedback" / student / chapter.name
                    / chapter.path.with_suffix(".html").name).exists(), (student, chapter.name)
    nbgrader(course, "export")
    handed_in = {(chapter.name, student) for chapter in chapters for student in students_of(chapter)}
    with open(course / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    # nbgrader exports a row for every student and assignment, 0 where nothing was handed in.
    missing = {(row["assignment"], row["student_id"]) for row in rows} - handed_in
    assert all(float(row["score"]) == 0.0 for row in rows
               if (row["assignment"], row["student_id"]) in missing)
    return {(row["assignment"], row["student_id"]): (float(row["score"]), float(row["max_score"]))
            for row in rows if (row["assignment"], row["student_id"]) in handed_in}


def test_nbgrader_releases_autogrades_and_exports_every_chapter(tmp_path):
    chapters = [chapter for chapter in read_book() if chapter.checks]  # not the appendices
    assert chapters
    quickest = min(chapters, key=lambda c: stored_seconds(c.notebook)).name

    def students_of(chapter) -> tuple[str, ...]:
        return STUDENTS if chapter.name == quickest else ("solved",)

    groups = shards(chapters, max(1, min(os.cpu_count() or 1, len(chapters))))
    start = time.perf_counter()
    with ThreadPoolExecutor(len(groups)) as pool:
        parts = list(pool.map(lambda ig: run_course(tmp_path / f"course{ig[0]}", ig[1], students_of),
                              enumerate(groups)))
    seconds = time.perf_counter() - start
    scores = {key: value for part in parts for key, value in part.items()}
    expected, table = {}, []
    for chapter in chapters:
        # the written answers wait for the teacher: autograde scores the checks only
        full = float(sum(chapter.points[name] for name, _ in chapter.checks))
        total = float(sum(chapter.points.values()))
        wanted = dict(zip(STUDENTS, (full, 0.0, 0.0), strict=True))
        for student in students_of(chapter):
            expected[(chapter.name, student)] = (wanted[student], total)
        table.append(f"{chapter.name:<24}" + "".join(
            f"{student}={scores.get((chapter.name, student), ('?', '?'))[0]:>5}  "
            for student in students_of(chapter)) + f"of {full:g}")
    print("\n".join(table) + f"\nnbgrader, {len(groups)} courses side by side: {seconds:.0f} s")
    assert scores == expected, "\n".join(table)


# --- the grading guard inside nbgrader ------------------------------------------------

def cheating_submission(released, chapter, student, cheats=CHEATS):
    """A toy submission: the solution, wrong answers with a cheat (tests/toy_chapter.py),
    or the solution with check ex2-half (2 points) deleted or stripped of its nbgrader
    metadata and rewritten to `print('passed')` under a wrong answer."""
    notebook = submission(released, chapter, "solved" if student != "untouched" else student)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if student in cheats and grade_id.endswith("-solution"):
            cell.source = cheats[student][grade_id.removesuffix("-solution")]
        elif student == "stripped_metadata" and grade_id == "ex2-half":
            del cell.metadata["nbgrader"]
            cell.source = "print('passed')"
        elif student == "stripped_metadata" and grade_id == "ex2-half-solution":
            cell.source = "def half(v):\n    return v"
    if student == "deleted_check":
        notebook.cells = [c for c in notebook.cells
                          if c.metadata.get("nbgrader", {}).get("grade_id") != "ex2-half"]
    return notebook


def test_nbgrader_is_not_fooled_by_a_patched_torch_or_a_removed_check(tmp_path):
    """Every cheat of tests/toy_chapter.py (a patched library or package class, checks
    rewritten by an input transformer, errors hidden by an exception handler, the
    course's source notebook read from disk) scores nothing in nbgrader's kernel."""
    from toy_chapter import POINTS, reading_the_source

    chapter = toy_chapter(tmp_path / "toy")
    course = tmp_path / "course"
    cheats = {**CHEATS, "read_source": reading_the_source(
        course / "source" / chapter.name / chapter.path.name)}
    expected = {"solved": float(POINTS), "deleted_check": POINTS - 2.0,
                "stripped_metadata": POINTS - 2.0, **{cheat: 0.0 for cheat in cheats}}
    scores = run_course(course, [chapter], students=tuple(expected),
                        make_submission=lambda released, chapter, student: cheating_submission(
                            released, chapter, student, cheats))
    total = float(sum(chapter.points.values()))  # the written answer included
    assert scores == {("01_toy", s): (points, total) for s, points in expected.items()}, scores
