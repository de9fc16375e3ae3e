"""make test's chapter stage: every chapter executed once, and that one run checked three ways.

    python -m tools.chapter_test [CHAPTER ...] [--jobs N] [pytest options]
        (default: every chapter; a chapter given as .py or .ipynb)

Each chapter runs once, top to bottom, in a fresh kernel; the longest chapters start
first (as the committed runs' cell timestamps predict), N at a time (default: the
machine's cores, or $JOBS), with OpenMP threads that sleep while they wait where the
chapters' threads outnumber the cores (tools/execute.py's pool_env). A chapter that
times code against a peer (RUNS_ALONE) runs first and by itself, so that a neighbour's
load does not move its ratios. What the run is:

- a chapter with exercises is graded by real nbgrader, as a teacher grades it: a course
  is laid out (python -m tools.exercises course), nbgrader releases the chapter, a student
  hands it back solved (each solution typed in without the markers) and `nbgrader
  autograde` runs it, under the course's grading guard and cell time limit; then
  `generate_feedback` and `export`. The solved copy also holds a proof cell after each
  check (tools/exercise_proof.py), which tries the student stub and every recorded
  near-miss answer on that check inside the same kernel. In the book's quickest
  chapter two more students hand in: the copy as released and one whose checks were
  rewritten to `print('passed')`; both must score 0 (nbgrader's own machinery).
- an appendix (no exercises) is executed with nbclient in chapters/, as `make execute`.

Then each run is checked, and each check is a pytest item:

- `chapters/NN_name.ipynb::Cell K`: nbval's comparison of the cell's fresh outputs with
  the committed ones, strict, with tools/sanitize.cfg: nbval's own collector (cell
  markers and tags such as NBVAL_IGNORE_OUTPUT) and its own comparison code run on the
  outputs of this run instead of a kernel of their own (`make nbval` still runs nbval
  the classic way);
- `::exercises`: the layout rules, the near-miss answers on record, and the proof:
  every check compares only against references the grading guard restores, passes on
  the solution (also without its hidden tests, as a student copy shows it) and fails
  on the stub and on every near-miss;
- `::nbgrader`: the solved student scored every autograded point (the written answers
  wait for the teacher), feedback was written, grades exported.

Per-chapter wall and CPU seconds are printed at the end and written to
_build/test/chapters.json.
"""

from __future__ import annotations

import copy
import csv
import json
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
import pytest
from nbval import plugin as nbval

from tools import exercise_proof, exercises
from tools.execute import default_jobs, execute_notebook, pool_env
from tools.notebooks import (
    BEGIN_SOLUTION,
    CHAPTER_NAME,
    END_SOLUTION,
    ROOT,
    Chapter,
    read_book,
    read_chapter,
    running_order,
    stored_seconds,
)

OUT = ROOT / "_build" / "test"
SANITIZE = ROOT / "tools" / "sanitize.cfg"
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
        answers = exercises.near_misses(chapter)
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


# --- the checks, as pytest items ---------------------------------------------------

RUNNER = pytest.StashKey[Runner]()
JOBS = default_jobs()  # set by main() from --jobs


def finished(config, chapter: Chapter) -> Run:
    """The chapter's run, once it is over; fail the item if it could not run."""
    found = config.stash[RUNNER]
    run = found.wait(chapter.name)
    if found.error:
        pytest.fail(f"the chapters could not be run: {found.error}", pytrace=False)
    if run.error:
        pytest.fail(f"{chapter.rel}: {run.error}", pytrace=False)
    return run


def chapter_cells(run: Run) -> list:
    """The run's cells that are the chapter's own (proof cells left out), checked
    against the committed chapter: the same cells, in order, with the same sources
    (a solution without its marker lines)."""
    cells = exercise_proof.without_proof_cells(run.executed.cells)
    committed = run.chapter.notebook.cells
    if len(cells) != len(committed):
        pytest.fail(f"{run.chapter.rel}: the run has {len(cells)} cells of the chapter's "
                    f"{len(committed)}", pytrace=False)
    for index, (ran, cell) in enumerate(zip(cells, committed, strict=True)):
        if (ran.cell_type, without_markers(ran.source)) != (cell.cell_type,
                                                            without_markers(cell.source)):
            pytest.fail(f"{run.chapter.rel}: cell {index} of the run is not the committed "
                        f"cell:\n{ran.source[:300]}\n---\n{cell.source[:300]}", pytrace=False)
    return cells


class RunCell(nbval.IPyNbCell):
    """nbval's check of one cell, on the outputs of the chapter's run.

    The comparison (`compare_outputs`: which output fields count, the sanitizers,
    the failure report) and the stream merging are nbval's own; what nbval does while
    its kernel runs the cell is repeated here for the recorded outputs: an error fails
    the cell unless it is marked to raise, and a reference cell that never ran is not
    compared.
    """

    def runtest(self):
        if self.options["skip"]:
            pytest.skip("the cell is marked NBVAL_SKIP")
        outputs = self.parent.ran()[self.cell_num].outputs
        outs = nbval.coalesce_streams(copy.deepcopy(outputs))
        error = next((out for out in outs if out.output_type == "error"), None)
        if error is not None and not self.options["check_exception"]:
            self.raise_cell_error("Cell execution caused an exception",
                                  "\n" + "\n".join(error.get("traceback", [])))
        unrun = self.cell.execution_count is None
        if unrun and self.cell.outputs:
            self.raise_cell_error("Unrun reference cell has outputs")
        reference = nbval.coalesce_streams(copy.deepcopy(self.cell.outputs))
        if self.options["check"] and not unrun and not self.compare_outputs(outs, reference):
            self.raise_cell_error("Cell outputs differ", "\n".join(self.comparison_traceback))


class ChapterFile(nbval.IPyNbFile):
    """A chapter: nbval's collector with the chapter's run in place of a kernel, then
    the chapter's exercises and its nbgrader grading."""

    _cells: list | None = None

    def collect(self):
        for item in super().collect():  # nbval's items, each with its markers and tags
            yield RunCell.from_parent(self, name=item.name, cell_num=item.cell_num,
                                      cell=item.cell, options=item.options)
        chapter = read_chapter(self.path)
        if chapter.checks:
            yield ExercisesItem.from_parent(self, name="exercises", chapter=chapter)
            yield NbgraderItem.from_parent(self, name="nbgrader", chapter=chapter)

    def setup(self):
        self.setup_sanitize_files()  # no kernel of its own

    def teardown(self):
        pass

    def ran(self) -> list:
        """The chapter's code cells as the run left them (waits for the run)."""
        if self._cells is None:
            run = finished(self.config, read_chapter(self.path))
            self._cells = [c for c in chapter_cells(run) if c.cell_type == "code"]
        return self._cells


class ExercisesItem(pytest.Item):
    """Layout, near-miss answers on record, and the proof from the run's proof cells."""

    def __init__(self, *, chapter: Chapter, **kwargs):
        super().__init__(**kwargs)
        self.chapter = chapter

    def runtest(self):
        chapter = self.chapter
        problems = exercises.structure_problems(chapter)
        if not problems:
            problems += exercises.answer_problems(chapter, exercises.near_misses(chapter))
            run = finished(self.config, chapter)
            chapter_cells(run)
            problems += exercise_proof.proof_problems(run.executed, chapter)
        if problems:
            pytest.fail(f"{chapter.rel}:\n" + "\n".join(f"  - {p}" for p in problems),
                        pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.chapter.rel}::exercises"


class NbgraderItem(pytest.Item):
    """nbgrader's grades: full marks for the solved copy, 0 for the others; feedback."""

    def __init__(self, *, chapter: Chapter, **kwargs):
        super().__init__(**kwargs)
        self.chapter = chapter

    def runtest(self):
        run = finished(self.config, self.chapter)
        # The written answers wait for the teacher (nbgrader's formgrader): autograde
        # scores the checks, out of every point of the chapter.
        full = float(sum(self.chapter.points[name] for name, _ in self.chapter.checks))
        total = float(sum(self.chapter.points.values()))
        wanted = {"solved": (full, total), "untouched": (0.0, total),
                  "print_passed": (0.0, total)}
        expected = {student: wanted[student] for student in run.students}
        got = {student: run.scores.get(student) for student in run.students}
        if got != expected:
            pytest.fail(f"nbgrader's grades for {self.chapter.name}: {got}, expected {expected} "
                        f"(see {shown(run.log)})", pytrace=False)
        missing = [student for student in run.students if not run.feedback.get(student)]
        if missing:
            pytest.fail(f"nbgrader generate_feedback wrote nothing for {missing}", pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.chapter.rel}::nbgrader"


# --- pytest hooks (this module is the plugin) ---------------------------------------

def pytest_configure(config):
    if not config.option.nbval_sanitize_with:
        config.option.nbval_sanitize_with = str(SANITIZE)


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".ipynb" and CHAPTER_NAME.match(file_path.stem):
        return ChapterFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    chapters = {}
    for item in items:  # after -k and -m have deselected what they do
        chapters.setdefault(item.path, None)
    config.stash[RUNNER] = Runner([read_chapter(path) for path in chapters], JOBS)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    if not session.config.option.collectonly and RUNNER in session.config.stash:
        session.config.stash[RUNNER].start()


def pytest_terminal_summary(terminalreporter, config):
    found = config.stash.get(RUNNER, None)
    if found is None or not found.seconds:  # nothing ran (--collect-only)
        return
    rows = sorted(found.runs.values(), key=lambda r: -r.seconds)
    write = terminalreporter.write_line
    write(f"chapters: {len(rows)} run once each, {found.jobs} at a time, in "
          f"{found.seconds:.0f} s ({sum(r.cpu_seconds for r in rows):.0f} s of CPU)")
    for run in rows:
        write(f"  {run.chapter.name:<28} {run.mode:<9} {run.seconds:6.1f} s  "
              f"{run.cpu_seconds:6.1f} s CPU" + (f"  students: {', '.join(run.students)}"
                                                 if run.students else ""))
    (found.out / "chapters.json").write_text(json.dumps({
        "jobs": found.jobs, "seconds": round(found.seconds, 1),
        "chapters": {run.chapter.name: {"mode": run.mode, "seconds": round(run.seconds, 1),
                                        "cpu_seconds": round(run.cpu_seconds, 1)}
                     for run in rows}}, indent=1))


def pytest_unconfigure(config):
    for process in list(RUNNING):  # pytest stopped before the runs ended (-x, Ctrl-C)
        stop(process)


# --- command line ------------------------------------------------------------------

def execute_to(source: Path, target: Path) -> int:
    """Run one chapter in a fresh kernel in chapters/ (errors recorded, not raised)."""
    notebook = nbformat.read(source, as_version=4)
    execute_notebook(notebook, allow_errors=True)
    nbformat.write(notebook, target)
    return 0


def main(argv: list[str] | None = None) -> int:
    global JOBS
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--execute"]:
        return execute_to(Path(argv[1]), Path(argv[2]))
    chapters, rest = [], []
    while argv:
        arg = argv.pop(0)
        if arg in ("--jobs", "-j"):
            JOBS = int(argv.pop(0))
        elif arg.startswith("--jobs="):
            JOBS = int(arg.split("=", 1)[1])
        elif arg.endswith((".py", ".ipynb")) and not arg.startswith("-"):
            chapters.append(str(Path(arg).resolve().with_suffix(".ipynb")))
        else:
            rest.append(arg)
    chapters = chapters or [str(c.path) for c in read_book()]
    return pytest.main(["-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=",
                        "--rootdir", str(ROOT), "-rs", *rest, *chapters],
                       plugins=[sys.modules[__name__]])


if __name__ == "__main__":
    sys.exit(main())
