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
  outputs of this run instead of a kernel of their own (`make chapters PART=nbval` still runs nbval
  the classic way);
- `::exercises`: the layout rules, the near-miss answers on record, and the proof:
  every check compares only against references the grading guard restores, passes on
  the solution (also without its hidden tests, as a student copy shows it) and fails
  on the stub and on every near-miss;
- `::nbgrader`: the solved student scored every autograded point (the written answers
  wait for the teacher), feedback was written, grades exported.

The runs themselves are tools/chapter_runs.py's (`Runner`, started when the items have
been collected); this module is the pytest plugin that checks them, and the command.
Per-chapter wall and CPU seconds are printed at the end and written to
_build/test/chapters.json.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbval import plugin as nbval

from tools import exercise_proof
from tools.chapter_runs import RUNNING, Run, Runner, shown, stop, without_markers
from tools.execute import default_jobs, execute_notebook
from tools.exercise_verify import answer_problems, near_misses, structure_problems
from tools.notebooks import CHAPTER_NAME, ROOT, Chapter, read_book, read_chapter

SANITIZE = ROOT / "tools" / "sanitize.cfg"


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
        problems = structure_problems(chapter)
        if not problems:
            problems += answer_problems(chapter, near_misses(chapter))
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
