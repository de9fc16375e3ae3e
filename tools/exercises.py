"""Exercises: student copies, grading, and the proof that every check can fail.

    python tools/exercises.py student [CHAPTER ...] [--out student]
        write student copies: each solution region becomes `raise NotImplementedError`,
        every output is cleared
    python tools/exercises.py grade STUDENT.ipynb [--chapter CHAPTER] [--json]
        run a student's notebook in a fresh kernel with the chapter's own checks
        (so that an edited check cannot pass) and report passed/failed per exercise;
        exit 0 only if every exercise passed
    python tools/exercises.py verify [CHAPTER ...] [-v]
        for each chapter: at least three exercises, each followed by its check; every
        check passed in the committed (nbval-verified) notebook; and, in one fresh run
        of the chapter, every check passes on the solution and fails on the student
        stub and on each recorded near-miss answer (tests/near_misses/NN_name.py)

An exercise is a code cell with a `### BEGIN SOLUTION` ... `### END SOLUTION`
region, followed by a code cell whose first line is `#| check NAME`.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import runpy
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from execute import execute_notebook, notebook_client  # noqa: E402
from notebooks import (  # noqa: E402
    CHAPTERS,
    ROOT,
    BookError,
    Chapter,
    directive,
    read_book,
    read_chapter,
    solution_regions,
)

MIN_EXERCISES = 3
MIN_NEAR_MISSES = 2
STUB = "raise NotImplementedError"
NEAR_MISSES = ROOT / "tests" / "near_misses"


@dataclass
class Result:
    name: str
    passed: bool
    detail: str = ""


# --- student copies -------------------------------------------------------------

def strip_solutions(source: str) -> str:
    """Replace each solution region (markers included) by an indented stub."""
    lines = source.splitlines()
    for begin, end in reversed(solution_regions(source)):
        indent = re.match(r"\s*", lines[begin]).group(0)
        lines[begin:end + 1] = [indent + STUB]
    return "\n".join(lines)


def student_copy(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy with solutions stubbed out and all outputs cleared."""
    student = copy.deepcopy(notebook)
    for cell in student.cells:
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
            cell.outputs = []
            cell.execution_count = None
    return student


def check_name(cell: nbformat.NotebookNode) -> str | None:
    """NAME for a code cell whose first line is `#| check NAME`."""
    if cell.cell_type != "code" or not cell.source.strip():
        return None
    found = directive(cell.source.splitlines()[0])
    return found[1] if found and found[0] == "check" else None


# --- grading --------------------------------------------------------------------

def error_of(cell: nbformat.NotebookNode) -> str | None:
    """'Ename: evalue' of a cell's error output, or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}".strip()
    return None


def grade(student: nbformat.NotebookNode, chapter: Chapter) -> list[Result]:
    """Run a student's notebook with the chapter's checks; one Result per exercise."""
    reference = {name: chapter.notebook.cells[i].source for name, i in chapter.checks}
    notebook = copy.deepcopy(student)
    present = set()
    for cell in notebook.cells:
        name = check_name(cell)
        if name in reference:
            cell.source = reference[name]  # the teacher's check, not the student's copy of it
            present.add(name)
    timed_out = None
    try:
        execute_notebook(notebook, allow_errors=True, timeout=600)
    except (CellTimeoutError, DeadKernelError) as err:
        timed_out = f"{type(err).__name__}: the notebook stopped before this check"
    results = []
    cells_by_name = {check_name(c): c for c in notebook.cells if check_name(c)}
    for name, _ in chapter.checks:
        cell = cells_by_name.get(name)
        if name not in present or cell is None:
            results.append(Result(name, False, "check cell missing from the notebook"))
        elif cell.get("execution_count") is None:
            results.append(Result(name, False, timed_out or "check cell did not run"))
        elif (error := error_of(cell)) is not None:
            results.append(Result(name, False, error))
        else:
            results.append(Result(name, True))
    return results


def report(results: list[Result], title: str) -> str:
    lines = [title]
    for r in results:
        lines.append(f"  {'passed' if r.passed else 'FAILED'}  {r.name}"
                     + (f"  ({r.detail})" if r.detail else ""))
    passed = sum(r.passed for r in results)
    lines.append(f"  {passed} of {len(results)} exercises passed")
    return "\n".join(lines)


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
    if solutions < MIN_EXERCISES and not chapter.is_appendix:  # appendices need none
        problems.append(f"{solutions} exercises; a chapter needs at least {MIN_EXERCISES}")
    for name, index in chapter.checks:
        cell = chapter.notebook.cells[index]
        if cell.get("execution_count") is None:
            problems.append(f"check `{name}` was not executed in the committed notebook")
        elif (error := error_of(cell)) is not None:
            problems.append(f"check `{name}` fails on the solution: {error}")
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


def defined_names(source: str) -> list[str]:
    """Top-level names a cell binds (def, class, import, assignment targets)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for child in ast.walk(node):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                    names.add(child.id)
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(child.name)
    return sorted(names)


def verify(chapter: Chapter, verbose: bool = False,
           answers: dict[str, dict[str, str]] | None = None) -> list[str]:
    """All problems with a chapter's exercises; empty when they are sound.

    One fresh run of the chapter. After each check has passed on the solution, the
    solution cell is replaced in turn by the student stub and by each recorded
    near-miss answer (the names the solution defines are deleted first, so that a
    wrong answer cannot pass on what the solution left behind) and the check must
    fail on each; then the solution runs again and its check must pass again.
    """
    problems = structure_problems(chapter)
    if problems or not chapter.checks:  # an appendix without exercises: nothing to run
        return problems
    answers = near_misses(chapter) if answers is None else answers
    names = [name for name, _ in chapter.checks]
    for unknown in sorted(set(answers) - set(names)):
        problems.append(f"{NEAR_MISSES.name}/{chapter.name}.py names `{unknown}`, "
                        f"which is no check of this chapter (checks: {', '.join(names)})")
    for name in names:
        if len(answers.get(name, {})) < MIN_NEAR_MISSES:
            problems.append(f"check `{name}` has {len(answers.get(name, {}))} near-miss answers in "
                            f"tests/near_misses/{chapter.name}.py; each exercise needs "
                            f"{MIN_NEAR_MISSES} (mistakes students really make)")
    notebook = copy.deepcopy(chapter.notebook)
    solution_before = {}  # check cell index -> its solution cell index
    last_solution = None
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and solution_regions(cell.source):
            last_solution = index
        elif check_name(cell):
            solution_before[index] = last_solution
    cells = list(enumerate(notebook.cells))
    notebook.cells.append(nbformat.v4.new_code_cell())  # scratch cell for the wrong answers
    client = notebook_client(notebook, allow_errors=True)

    def run(source: str) -> str | None:
        """Execute source in the chapter's kernel; its error, or None."""
        cell = nbformat.v4.new_code_cell(source)
        client.execute_cell(cell, len(notebook.cells) - 1, store_history=False)
        return error_of(cell)

    client.reset_execution_trackers()
    with client.setup_kernel():
        for index, cell in cells:
            if cell.cell_type != "code":
                continue
            client.execute_cell(cell, index)
            if index not in solution_before:
                continue
            name, check = check_name(cell), cell.source
            solution = notebook.cells[solution_before[index]].source
            if (error := error_of(cell)) is not None:
                problems.append(f"check `{name}` fails on the solution: {error}")
                continue
            variants = [("the student stub", strip_solutions(solution))]
            variants += [(f"near-miss \"{label}\"", source)
                         for label, source in answers.get(name, {}).items()]
            forget = "".join(f"globals().pop({n!r}, None)\n" for n in defined_names(solution))
            for label, source in variants:
                run(forget)
                run(source)
                error = run(check)
                if error is None:
                    problems.append(f"check `{name}` passes on {label}: it cannot tell that "
                                    "answer from the solution")
                elif verbose:
                    print(f"  {name}: fails on {label}: {error.splitlines()[0][:160]}")
            run(forget)
            if (error := run(solution) or run(check)) is not None:
                problems.append(f"check `{name}` fails on the solution after the wrong answers "
                                f"ran (state not restored?): {error}")
    return problems


# --- command line ---------------------------------------------------------------

def chapter_for(student_path: Path, explicit: Path | None) -> Chapter:
    path = explicit or CHAPTERS / student_path.with_suffix(".ipynb").name
    if not path.exists():
        raise BookError(f"no chapter {path.relative_to(ROOT)} to grade {student_path.name} "
                        "against; name it with --chapter")
    return read_chapter(path.resolve())


def selected(paths: list[Path]) -> list[Chapter]:
    if not paths:
        return read_book()
    return [read_chapter(p.resolve().with_suffix(".ipynb")) for p in paths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="write student copies")
    student.add_argument("chapters", nargs="*", type=Path)
    student.add_argument("--out", type=Path, default=ROOT / "student")
    grader = commands.add_parser("grade", help="grade a student's notebook")
    grader.add_argument("notebook", type=Path)
    grader.add_argument("--chapter", type=Path)
    grader.add_argument("--json", action="store_true", help="print results as JSON")
    verifier = commands.add_parser("verify", help="prove every check can fail")
    verifier.add_argument("chapters", nargs="*", type=Path)
    verifier.add_argument("-v", "--verbose", action="store_true",
                          help="print each wrong answer's failure message")
    args = parser.parse_args(argv)

    try:
        if args.command == "student":
            args.out.mkdir(parents=True, exist_ok=True)
            for chapter in selected(args.chapters):
                target = args.out / chapter.path.name
                nbformat.write(student_copy(chapter.notebook), target)
                print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
                      f" ({len(chapter.checks)} exercises)")
            return 0
        if args.command == "grade":
            chapter = chapter_for(args.notebook, args.chapter)
            results = grade(nbformat.read(args.notebook, as_version=4), chapter)
            if args.json:
                print(json.dumps([r.__dict__ for r in results], ensure_ascii=False, indent=2))
            else:
                print(report(results, f"{args.notebook} (graded against {chapter.rel})"))
            return 0 if all(r.passed for r in results) else 1
        proven, failures = 0, 0
        for chapter in selected(args.chapters):
            if args.verbose:
                print(f"{chapter.rel}:", flush=True)
            problems = verify(chapter, verbose=args.verbose)
            status = "ok" if not problems else "PROBLEMS"
            answers = sum(len(v) for v in near_misses(chapter).values())
            print(f"{chapter.rel}: {len(chapter.checks)} checks, {answers} near-miss answers, "
                  f"{status}", flush=True)
            for problem in problems:
                print(f"  - {problem}")
            failures += bool(problems)
            proven += 0 if problems else 1
        print(f"chapters whose checks pass on the solution and fail on the stub and on "
              f"every near-miss answer: {proven} passed, {failures} failed")
        return 1 if failures else 0
    except BookError as err:
        print(f"exercises: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
