"""Verification of a chapter's exercises: `python -m tools.exercises verify`.

For each chapter: at least four exercises, each check followed by hidden tests, every
check passed in the committed (nbval-verified) notebook (`structure_problems`); at least
two near-miss answers on record for each check (tests/near_misses/NN_name.py,
`answer_problems`); and, in one fresh run of the chapter under the grading guard and
barrier, every check passes on the solution (also without its hidden tests), compares
only against references the guard restores, and fails on the student stub and on each
near-miss answer (`verify`: the proof cells of tools/exercise_proof.py).

Used by tools/exercises.py (the `verify` command) and tools/chapter_test.py (`make
test`'s `::exercises` items: the same rules and the proof, on the run nbgrader grades).
"""

from __future__ import annotations

import runpy
import tempfile
import textwrap
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from tools import exercise_proof, grading_guard
from tools.execute import notebook_client
from tools.exercise_cells import check_name, error_of, stderr_of
from tools.exercise_table import exercises_of
from tools.grading import answer_text, barrier_folders
from tools.notebooks import (
    ROOT,
    BookError,
    Chapter,
    hidden_test_regions,
    solution_regions,
    stored_seconds,
)

MIN_EXERCISES = 4
MIN_NEAR_MISSES = 2
NEAR_MISSES = ROOT / "tests" / "near_misses"


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


def verify_chapters(chapters: list[Chapter], verbose: bool = False, jobs: int = 1) -> int:
    """The `verify` command: verify each chapter, print what was found and a total; exit
    status 1 if any chapter has problems."""
    proven, failures, without = 0, 0, 0
    for chapter, problems in verified(chapters, verbose, jobs):
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
