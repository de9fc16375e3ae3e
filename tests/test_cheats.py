"""The wrong answers and cheats that scored before issue 20, graded as a teacher grades a
class: through real nbgrader and through `make grade`, on real chapters. Each must score
nothing, by both routes.

The students (one notebook per chapter each):

- `issue_answers` and `issue_answers_2`: in every exercise, the wrong answers and cheats
  that the issue lists for it (near-misses labelled "(issue 20)" in tests/near_misses/:
  the first, then the second where it lists two), else the first recorded near-miss: an
  answer fitted to one shape or one eps, a forbidden function, a patched reference class
  (the notebook's or the package's), the teacher's notebook read from disk, numbers copied
  from a failure message;
- `solved`: the solutions, as a student would type them: the control, at full marks, through
  `make grade` (the chapters stage of `make test` grades each chapter's solved copy through
  nbgrader already, at full marks: tools/chapter_test.py).

Every check of every chapter is proven against its stub and near-misses by `make
exercises` (one route, the book's kernel with the guard); this file proves, on the
chapters the issue was tried on (03, 07, 13), that nbgrader's route and the gradebook
agree. The cheats that do not depend on the chapter (checks rewritten by an IPython input
transformer, errors swallowed by `set_custom_exc`, a patched library, the teacher's
notebook read from disk) are graded on a made-up chapter through nbgrader
(tests/test_nbgrader.py) and through the gradebook (tests/test_exercises.py); the chapters
stage of `make test` also hands nbgrader a real chapter whose check cells were replaced by
`print('passed')` (tools/chapter_test.py). They ran on chapter 03 here too until issue 24,
four more runs of a real chapter that proved nothing new.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools import exercise_verify, exercises
from tools.notebooks import BEGIN_SOLUTION, END_SOLUTION, read_chapter

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.nbgrader

# chapter -> the students who hand it in
ISSUE = ("solved", "issue_answers", "issue_answers_2")
CHAPTERS = {"03_attention": ISSUE, "07_blocks": ISSUE, "13_refinements": ISSUE}
BIN = Path(sys.executable).parent


def issue_answer(answers: dict[str, str], which: int) -> str:
    """The which-th answer the issue lists for an exercise (the last one if it lists fewer),
    else the first recorded near-miss."""
    listed = [source for label, source in answers.items() if "(issue 20)" in label]
    pool = listed or list(answers.values())[:1]
    return pool[min(which, len(pool) - 1)]


def submission(chapter, released: nbformat.NotebookNode, student: str) -> nbformat.NotebookNode:
    notebook = nbformat.from_dict(released)
    wrong = exercise_verify.near_misses(chapter)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if not cell.metadata.get("nbgrader", {}).get("solution") or cell.cell_type != "code":
            continue
        name = grade_id.removesuffix("-solution")
        if student == "solved":
            original = next(c.source for c in chapter.notebook.cells
                            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
            cell.source = "\n".join(line for line in original.splitlines()
                                    if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))
        else:
            cell.source = issue_answer(wrong[name], 1 if student.endswith("_2") else 0)
    return notebook


def test_the_issue_class_scores_nothing_through_nbgrader_and_make_grade(tmp_path):
    chapters = [read_chapter(ROOT / "chapters" / f"{name}.ipynb") for name in CHAPTERS]
    # the two issue students hand in every listed answer: no exercise lists more than two
    listed = {(chapter.name, name): sum("(issue 20)" in label for label in answers)
              for chapter in chapters for name, answers in exercise_verify.near_misses(chapter).items()}
    # 12 since chapter 07's exercises 1 and 2 were replaced (two of its listed answers went with them)
    assert sum(listed.values()) == 12 and max(listed.values()) == 2, listed
    course = tmp_path / "course"
    subprocess.run([sys.executable, "-m", "tools.exercises", "course", str(course),
                    *[str(c.path) for c in chapters]], check=True, capture_output=True, cwd=ROOT)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1"}

    def nbgrader(*args):
        run = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=env,
                             capture_output=True, text=True, timeout=3600)
        assert run.returncode == 0, f"nbgrader {args}:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"

    nbgrader("generate_assignment", "*")
    returned = tmp_path / "returned"
    for chapter in chapters:
        released = nbformat.read(course / "release" / chapter.name / chapter.path.name, as_version=4)
        for student in CHAPTERS[chapter.name]:
            notebook = submission(chapter, released, student)
            folders = [returned / student]
            if student != "solved":  # the chapters stage grades the solved copy by nbgrader
                folders.append(course / "submitted" / student / chapter.name)
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
                nbformat.write(notebook, folder / chapter.path.name)
    nbgrader("autograde", "*")
    nbgrader("export")
    with open(course / "grades.csv", newline="") as handle:
        by_nbgrader = {(r["assignment"], r["student_id"]): float(r["score"]) for r in csv.DictReader(handle)}

    out = tmp_path / "graded"
    exercises.main(["grade", str(returned), "--out", str(out), "--jobs", "2"])
    with open(out / "summary.csv", newline="") as handle:
        by_gradebook = {row["student"]: row for row in csv.DictReader(handle)}

    table = []
    for chapter in chapters:
        full = float(sum(chapter.points[name] for name, _ in chapter.checks))
        for student in CHAPTERS[chapter.name]:
            want = full if student == "solved" else 0.0
            routes = {"make grade": float(by_gradebook[student][chapter.name].split("/")[0])}
            if student != "solved":
                routes["nbgrader"] = by_nbgrader[(chapter.name, student)]
            table.append((chapter.name, student, want, routes))
    print("\n".join(f"{c:<16} {s:<17} want {w:>4g}  " + "  ".join(f"{k} {v:>4g}" for k, v in r.items())
                     for c, s, w, r in table))
    assert all(set(r.values()) == {w} for _, _, w, r in table), table
