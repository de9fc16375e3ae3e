"""Exercises: student copies, grading, a student's self-check, and the proof that checks fail.

    python -m tools.exercises student [CHAPTER ...] [--out student] [--force] [--language zh]
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
        students from the roster or the folders (tools/returned_notebooks.py); write
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
    python -m tools.exercises course DIR [CHAPTER ...] [--language zh]
        lay out an nbgrader course: DIR/nbgrader_config.py and DIR/source/NN_name/

Each command's work is done in a module of its own: tools/student_copies.py
(`student`), tools/gradebook.py (`grade`, a class: each notebook graded in a child
process, `grade-one`) and tools/grading.py (one notebook: `grade-one`, `check`),
tools/exercise_verify.py (`verify`), tools/stamping.py (`stamp`) and
tools/nbgrader_course.py (`course`); this file reads the command line.

An exercise is a code cell with a `### BEGIN SOLUTION` ... `### END SOLUTION`
region, followed by a code cell whose first line is `#| check NAME [points=N]`, or a
written answer: a markdown cell whose first line is `<!-- #| answer NAME points=N -->`
(graded by hand).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat

from tools import gradebook, nbgrader_course
from tools.execute import default_jobs
from tools.exercise_verify import verify_chapters
from tools.grading import grade, grade_file, report
from tools.notebooks import CHAPTERS, ROOT, BookError, Chapter, read_book, read_chapter
from tools.returned_notebooks import recognise
from tools.stamping import stamp
from tools.student_copies import write_student_copies

# --- the chapters a command is for --------------------------------------------

def chapter_for(student_path: Path, explicit: Path | None) -> Chapter:
    """The chapter a notebook belongs to: --chapter, else recognised from its content."""
    if explicit is not None:
        return read_chapter(explicit.resolve().with_suffix(".ipynb"))
    chapter, why = recognise(nbformat.read(student_path, as_version=4), read_book())
    if chapter is None:
        raise BookError(f"{student_path}: {why}; name the chapter with --chapter")
    return chapter


def selected(paths: list[Path]) -> list[Chapter]:
    if not paths:
        return read_book()
    return [read_chapter(p.resolve().with_suffix(".ipynb")) for p in paths]


def chinese_chapters(paths: list[Path]) -> list[Chapter]:
    """The Chinese edition's chapters (those of `paths`, by name, or all it has), built from
    the catalogues first (tools/i18n.py build, into _build/zh/chapters/). Their checks and
    code are the English chapters', so a copy is graded against those."""
    from tools import i18n
    from tools.i18n_catalogues import BUILD

    i18n.build()
    wanted = {path.stem for path in paths}
    return [c for c in read_book(BUILD / "chapters") if not wanted or c.name in wanted]


def with_exercises(chapters: list[Chapter]) -> list[Chapter]:
    """The chapters that have exercises (an appendix has none: nothing to hand out)."""
    return [chapter for chapter in chapters if chapter.checks]



# --- command line ---------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per task (the module's docstring says each)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="write student copies")
    student.add_argument("chapters", nargs="*", type=Path)
    student.add_argument("--out", type=Path, default=ROOT / "student")
    student.add_argument("--force", action="store_true",
                         help="overwrite copies that a student has edited")
    student.add_argument("--language", choices=["en", "zh"], default="en",
                         help="zh: the Chinese edition's chapters (tools/i18n.py), into "
                              "student-zh/ unless --out says otherwise")
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
    course.add_argument("--language", choices=["en", "zh"], default="en",
                        help="zh: a course of the Chinese edition's chapters, its own course "
                             "(nbgrader checksums each graded cell as released)")
    return parser


def self_check(notebook: Path, explicit: Path | None) -> int:
    """The `check` command: grade one notebook as grading does and print the report."""
    chapter = chapter_for(notebook, explicit)
    print(f"running {notebook} with the checks of {chapter.rel}, each with its "
          "hidden tests, as grading runs them ...", flush=True)
    results = grade(nbformat.read(notebook, as_version=4), chapter)
    print(report(results, f"{notebook} (chapter {chapter.number:02d} · "
                          f"{chapter.title})"))
    return 0 if all(r.passed for r in results) else 1


def run(args: argparse.Namespace) -> int:
    """Run the command that `args` names; its exit status."""
    if args.command == "student":
        if args.language == "en":
            return write_student_copies(with_exercises(selected(args.chapters)), args.out,
                                        args.force)
        return write_student_copies(with_exercises(chinese_chapters(args.chapters)),
                                    ROOT / "student-zh" if args.out == ROOT / "student" else args.out,
                                    args.force)
    if args.command == "grade":
        return gradebook.main(args)
    if args.command == "grade-one":
        print(json.dumps(grade_file(args.notebook, args.chapter, args.timeout,
                                    args.protect), ensure_ascii=False))
        return 0
    if args.command == "check":
        return self_check(args.notebook, args.chapter)
    if args.command == "stamp":
        return stamp(selected(args.chapters), args.check, whole_book=not args.chapters)
    if args.command == "course":
        chapters = (selected(args.chapters) if args.language == "en"
                    else chinese_chapters(args.chapters))
        return nbgrader_course.write_course(args.directory, with_exercises(chapters),
                                            args.language)
    return verify_chapters(selected(args.chapters), args.verbose, args.jobs)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except BookError as err:
        print(f"exercises: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
