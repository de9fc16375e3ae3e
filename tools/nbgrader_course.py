"""Lay out an nbgrader course for the book: `python -m tools.exercises course DIR`.

DIR/nbgrader_config.py and DIR/source/NN_name/NN_name.ipynb, one assignment per
chapter (the chapter notebook as committed, nbgrader's metadata already in it, less
jupytext's pairing, so that no .py file appears beside a student's copy). With
`--language zh`, the Chinese edition's chapters, as a course of their own
(`transformer-book-zh`): nbgrader checksums each graded cell as it releases it, so one
course cannot hold both languages.
Then, in DIR, with this project's environment active (its bin/ first on PATH, since
nbgrader calls `alembic` from there):

    nbgrader generate_assignment 04_causal_mask      # release/04_causal_mask/
    nbgrader autograde 04_causal_mask                # submitted/STUDENT/04_causal_mask/
    nbgrader generate_feedback 04_causal_mask
    nbgrader export                                  # grades.csv

The configuration sets what the book needs from nbgrader: a cell time limit that
chapter 09's training fits in, and the grading guard and barrier in every grading kernel
(a notebook being graded cannot patch what the checks compare against, nor read the
course's folder, source/ with the solutions and submitted/ with the other students'
work, nor the book's repository; it may read its own folder).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from tools import grading_guard
from tools.notebooks import PACKAGE, ROOT, Chapter

CELL_TIMEOUT = 900  # seconds; chapter 09 trains for about two minutes in one cell

CONFIG = '''\
# nbgrader configuration for the course "Building a Transformer, step by step".
# Written by `python -m tools.exercises course` from {root}.
c = get_config()  # noqa: F821 - provided by nbgrader

c.CourseDirectory.course_id = "{course_id}"

# Chapter 09 trains a model for about two minutes in one cell; nbgrader's default
# limit is 30 seconds per cell.
c.Execute.timeout = {timeout}

# Every grading kernel loads the book's grading guard first: before each check it puts
# back torch, numpy, math and builtins functions and the book's package that a solution
# replaced, and it fails a check whose answer replaces them while the check runs
# (tools/grading_guard.py). Its barrier keeps the notebook from reading this course's
# folder (but the notebook's own) and the book's repository (tools/grading_barrier.py).
c.Execute.extra_arguments = {arguments!r}
'''


def config_text(directory: Path, language: str = "en") -> str:
    arguments = grading_guard.kernel_arguments(
        protect=[str(directory.resolve()), str(ROOT)],
        allow=[str(PACKAGE)])
    course_id = "transformer-book" + ("" if language == "en" else f"-{language}")
    return CONFIG.format(root=ROOT, timeout=CELL_TIMEOUT, arguments=arguments,
                         course_id=course_id)


def write_course(directory: Path, chapters: list[Chapter], language: str = "en") -> int:
    """Write (or refresh) the course's config and its source notebooks: the English
    chapters, or with language="zh" the Chinese edition's (built from the catalogues;
    their code cells and checks are the English ones, byte for byte)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nbgrader_config.py").write_text(config_text(directory, language))
    for chapter in chapters:
        target = directory / "source" / chapter.name / chapter.path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        notebook = nbformat.read(chapter.path, as_version=4)
        notebook.metadata.pop("jupytext", None)  # students get no .py pair beside it
        nbformat.write(notebook, target)
    print(f"course in {directory}: nbgrader_config.py and {len(chapters)} assignments in "
          f"source/ ({', '.join(c.name for c in chapters)})")
    print(f"next, in {directory}: nbgrader generate_assignment NN_name (with the project's "
          ".venv/bin first on PATH)")
    return 0
