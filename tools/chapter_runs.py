"""The runs of make test's chapter stage: every chapter executed once, for
tools/chapter_test.py to check.

Each chapter runs once, top to bottom, in a fresh kernel (`Runner`); the longest
chapters start first, N at a time, each worker with OpenMP threads that sleep while
they wait where the chapters' threads outnumber the cores (tools/execute.py's
pool_env); the chapters in RUNS_ALONE run first and by themselves.

- A chapter with exercises is graded by real nbgrader: each worker owns a course
  (python -m tools.exercises course) in which nbgrader releases every graded chapter;
  a student hands the chapter back solved (`submission`: each solution typed in
  without the markers, and a proof cell after each check, tools/exercise_proof.py),
  `nbgrader autograde` runs it, then `generate_feedback` and `export`. In the book's
  quickest chapter two more students hand in (ZERO_STUDENTS): the copy as released
  and one whose checks were rewritten to `print('passed')`.
- An appendix (no exercises) is executed with nbclient in chapters/, in a child process
  (`python -m tools.chapter_test --execute`).

What each run gave (the executed notebook, nbgrader's scores, whether feedback was
written, wall and CPU seconds) is kept in its `Run`, under _build/test/ (OUT).
"""

from __future__ import annotations

import copy
import csv
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tools import exercise_proof
from tools.execute import pool_env
from tools.exercise_verify import near_misses
from tools.notebooks import (
    BEGIN_SOLUTION,
    END_SOLUTION,
    ROOT,
    Chapter,
    read_book,
    running_order,
    stored_seconds,
)

OUT = ROOT / "_build" / "test"
BIN = Path(sys.executable).parent  # the environment's bin/: nbgrader, alembic, python
ZERO_STUDENTS = ("untouched", "print_passed")


# --- what each student hands in ----------------------------------------------------

def without_markers(source: str) -> str:
    """A solution as a student would type it: the region's content, no marker lines."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))


def submission(released: nbformat.NotebookNode, chapter: Chapter, student: str,
               answers: dict[str, dict[str, str]] | None = None) -> nbformat.NotebookNode:
    """The notebook `student` hands back for `chapter`.

    solved: each solution cell holds the chapter's solution; with `answers`, a proof
    cell follows each check. untouched: the release as it is. print_passed: every
    check rewritten to `print('passed')`.
    """
    notebook = nbformat.from_dict(copy.deepcopy(released))
    solutions = {cell.metadata["nbgrader"]["grade_id"]: cell.source
                 for cell in chapter.notebook.cells
                 if cell.metadata.get("nbgrader", {}).get("solution")}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if student == "solved" and meta.get("solution"):
            cell.source = without_markers(solutions[meta["grade_id"]])
        elif student == "print_passed" and meta.get("grade"):
            cell.source = "print('passed')"
    if student == "solved" and answers is not None:
        if len(notebook.cells) != len(chapter.notebook.cells):
            raise RuntimeError(f"{chapter.rel}: nbgrader released {len(notebook.cells)} cells "
                               f"of the chapter's {len(chapter.notebook.cells)}")
        notebook = exercise_proof.with_proof_cells(notebook, chapter, answers)
    return notebook


# --- running ---------------------------------------------------------------------

@dataclass
class Run:
    """One chapter's single execution and what came of it."""

    chapter: Chapter
    mode: str  # "nbgrader" or "nbclient"
    students: tuple[str, ...] = ()
    executed: nbformat.NotebookNode | None = None  # the run's notebook (proof cells included)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    error: str | None = None  # the run itself failed (a crash, not a failing cell)
    log: Path | None = None
    scores: dict[str, tuple[float, float]] = field(default_factory=dict)  # student -> score, max
    feedback: dict[str, bool] = field(default_factory=dict)  # student -> feedback written
    done: threading.Event = field(default_factory=threading.Event)


def shown(path: Path) -> str:
    """A path as a message shows it: relative to the repository where it lies inside."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


RUNNING: set[subprocess.Popen] = set()  # stopped, kernels included, if pytest stops early


def run_timed(command: list[str], cwd: Path, log: Path, env: dict | None = None,
              timeout: float = 7200) -> tuple[int, float, float]:
    """Run a command, its output into `log`; (exit status, wall s, CPU s of it and its children)."""
    start = time.perf_counter()
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=handle,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        RUNNING.add(process)
        deadline = start + timeout
        while True:  # os.wait4 gives the CPU time of the process and what it waited for
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                stop(process)
            time.sleep(0.2)
        RUNNING.discard(process)
    process.returncode = os.waitstatus_to_exitcode(status)
    return (process.returncode, time.perf_counter() - start, usage.ru_utime + usage.ru_stime)


def stop(process: subprocess.Popen) -> None:
    """End a command and what it started (its kernels): its whole process group."""
    try:
        os.killpg(process.pid, 9)
    except ProcessLookupError:
        pass


def nbgrader_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """What a teacher's shell has with the project's environment active (on top of base,
    default os.environ)."""
    base = dict(os.environ if base is None else base)
    return {**base, "PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}"}


class Runner:
    """Runs every chapter once, `jobs` at a time, longest first; each worker owns a course.

    The chapters in RUNS_ALONE run first, one after another, with nothing beside them.
    """

    def __init__(self, chapters: list[Chapter], jobs: int, out: Path | None = None) -> None:
        self.out = out or OUT
        self.jobs = max(1, jobs)
        every = read_book()
        graded = [c for c in every if c.checks]
        self.quickest = min(graded, key=lambda c: stored_seconds(c.notebook)) if graded else None
        self.runs: dict[str, Run] = {}
        for chapter in chapters:
            if chapter.checks:
                students = ("solved",) + (ZERO_STUDENTS if chapter.name == self.quickest.name
                                          else ())
                self.runs[chapter.name] = Run(chapter, "nbgrader", students)
            else:
                self.runs[chapter.name] = Run(chapter, "nbclient")
        self.error: str | None = None
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wait(self, name: str) -> Run:
        run = self.runs[name]
        run.done.wait()
        return run

    # the work

    def _main(self) -> None:
        start = time.perf_counter()
        try:
            shutil.rmtree(self.out, ignore_errors=True)
            (self.out / "executed").mkdir(parents=True)
            graded = [r.chapter for r in self.runs.values() if r.mode == "nbgrader"]
            courses = self._courses(graded) if graded else []
            first, rest = running_order([r.chapter for r in self.runs.values()])
            alone = [self.runs[c.name] for c in first]
            together = [self.runs[c.name] for c in rest]
            for run in alone:
                if run.mode == "nbgrader":  # grading needs a course of its own worker
                    raise RuntimeError(f"{run.chapter.rel} has exercises and cannot run alone")
                self._worker(self._queue(run), None, pool_env(1))
            work = self._queue(*together)
            jobs = min(self.jobs, len(together))
            workers = [threading.Thread(target=self._worker, args=(
                           work, courses[i] if courses else None, pool_env(jobs)))
                       for i in range(jobs)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        except Exception as err:  # noqa: BLE001 - every item reports it
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self.seconds = time.perf_counter() - start
            for run in self.runs.values():
                run.done.set()

    @staticmethod
    def _queue(*runs: Run) -> queue.Queue[Run]:
        work: queue.Queue[Run] = queue.Queue()
        for run in runs:
            work.put(run)
        return work

    def _courses(self, chapters: list[Chapter]) -> list[Path]:
        """One nbgrader course per worker, each with every graded chapter released."""
        first = self.out / "course0"
        subprocess.run([sys.executable, "-m", "tools.exercises", "course",
                        str(first.resolve()), *[str(c.path) for c in chapters]],
                       check=True, capture_output=True, cwd=ROOT)
        status, _, _ = run_timed([str(BIN / "nbgrader"), "generate_assignment", "*"], first,
                                 self.out / "generate_assignment.log", env=nbgrader_env())
        if status:
            raise RuntimeError("nbgrader generate_assignment failed: see "
                               f"{shown(self.out / 'generate_assignment.log')}")
        for chapter in chapters:
            released = (first / "release" / chapter.name / chapter.path.name).read_text()
            if BEGIN_SOLUTION in released or "BEGIN HIDDEN TESTS" in released:
                raise RuntimeError(f"nbgrader's release of {chapter.rel} holds a solution "
                                   "or hidden tests")
        courses = [first]
        for i in range(1, min(self.jobs, len(self.runs))):
            courses.append(self.out / f"course{i}")
            shutil.copytree(first, courses[-1])  # the gradebook.db knows the assignments
        return courses

    def _worker(self, work: queue.Queue, course: Path | None, env: dict[str, str]) -> None:
        """Run chapters from `work` until it is empty, with `env` (tools/execute.py's pool_env)."""
        graded = []
        while True:
            try:
                run = work.get_nowait()
            except queue.Empty:
                break
            try:
                if run.mode == "nbgrader":
                    self._autograde(run, course, env)
                    graded.append(run)
                else:
                    self._execute(run, env)
            except Exception as err:  # noqa: BLE001 - reported by the chapter's items
                run.error = f"{type(err).__name__}: {err}"
            if run.mode != "nbgrader" or run.error:
                run.done.set()
        if graded:
            try:
                self._feedback_and_export(course, graded)
            except Exception as err:  # noqa: BLE001
                for run in graded:
                    run.error = run.error or f"{type(err).__name__}: {err}"
            for run in graded:
                run.done.set()

    def _execute(self, run: Run, env: dict[str, str]) -> None:
        target = self.out / "executed" / run.chapter.path.name
        run.log = self.out / f"{run.chapter.name}.log"
        status, run.seconds, run.cpu_seconds = run_timed(
            [sys.executable, "-m", "tools.chapter_test", "--execute", str(run.chapter.path),
             str(target.resolve())],
            ROOT, run.log, env=env)
        if status:
            run.error = f"the chapter did not run to the end: see {shown(run.log)}"
        else:
            run.executed = nbformat.read(target, as_version=4)

    def _autograde(self, run: Run, course: Path, env: dict[str, str]) -> None:
        chapter = run.chapter
        released = nbformat.read(course / "release" / chapter.name / chapter.path.name,
                                 as_version=4)
        answers = near_misses(chapter)
        for student in run.students:
            folder = course / "submitted" / student / chapter.name
            folder.mkdir(parents=True)
            nbformat.write(submission(released, chapter, student, answers), folder / chapter.path.name)
        run.log = self.out / f"{chapter.name}.log"
        status, run.seconds, run.cpu_seconds = run_timed(
            [str(BIN / "nbgrader"), "autograde", chapter.name], course, run.log,
            env=nbgrader_env(env))
        if status:
            run.error = f"nbgrader autograde failed: see {shown(run.log)}"
            return
        graded = course / "autograded" / "solved" / chapter.name / chapter.path.name
        run.executed = nbformat.read(graded, as_version=4)
        shutil.copyfile(graded, self.out / "executed" / chapter.path.name)

    def _feedback_and_export(self, course: Path, runs: list[Run]) -> None:
        log = self.out / f"{course.name}-feedback-export.log"
        for command in (["generate_feedback", "*"], ["export"]):
            status, _, _ = run_timed([str(BIN / "nbgrader"), *command], course, log,
                                     env=nbgrader_env())
            if status:
                raise RuntimeError(f"nbgrader {command[0]} failed: see {shown(log)}")
        with open(course / "grades.csv", newline="") as handle:
            rows = {(row["assignment"], row["student_id"]): row for row in csv.DictReader(handle)}
        for run in runs:
            for student in run.students:
                row = rows.get((run.chapter.name, student))
                if row is not None:
                    run.scores[student] = (float(row["score"]), float(row["max_score"]))
                run.feedback[student] = (course / "feedback" / student / run.chapter.name
                                         / run.chapter.path.with_suffix(".html").name).exists()
