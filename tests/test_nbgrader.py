"""Real nbgrader, end to end: the grading guard inside it, and make test's one run per chapter.

Every chapter with exercises is graded by real nbgrader in `make test` (`make chapters`,
tools/chapter_test.py): a course is laid out as the teacher's page says, nbgrader 0.9.6
releases the chapter, a solved copy is autograded to full marks, feedback is written
and grades are exported; that same run's outputs are compared with the committed ones
(nbval's comparison) and its proof cells prove every check against the stub and the
recorded near-misses. Here, on a small made-up chapter:

- that run, checked: a changed output fails its cell, an ignored one does not, the
  cells after the proof print what a plain run prints, a near-miss that passes a check
  fails the chapter's exercise proof, and nbgrader grades the solved copy full marks;
- nbgrader's grading is not fooled by any cheat of tests/toy_chapter.py (a patched
  library or package class, checks rewritten by an input transformer, errors hidden by
  an exception handler, the course's source notebook read from disk), nor by a deleted
  check or one stripped of its metadata (the grading guard and barrier in nbgrader's
  kernel, loaded by the course's nbgrader_config.py).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from toy_chapter import CHEATS, toy_chapter

from tools import chapter_runs, chapter_test, execute, exercise_cells, exercise_verify
from tools.chapter_runs import submission
from tools.notebooks import BEGIN_SOLUTION, RUNS_ALONE, read_chapter

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.nbgrader

BIN = Path(sys.executable).parent  # the environment's bin/: nbgrader, alembic, python


def environment() -> dict[str, str]:
    """What a teacher's shell has with the project's environment active."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "OMP_NUM_THREADS": "1"}


def nbgrader(course: Path, *args: str, timeout: int = 3600) -> str:
    run = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course, env=environment(),
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return run.stdout + run.stderr


def run_course(course: Path, chapters, students, make_submission=submission,
               language: str = "en") -> dict:
    """Lay out a course for `chapters`, release, submit, autograde, feedback, export.

    Returns {(chapter name, student): (score, max score)} from nbgrader's grades.csv.
    """
    subprocess.run([sys.executable, "-m", "tools.exercises", "course", str(course),
                    *[str(c.path) for c in chapters], "--language", language],
                   check=True, capture_output=True, cwd=ROOT)
    nbgrader(course, "generate_assignment", "*")
    for chapter in chapters:
        released = nbformat.read(course / "release" / chapter.name / chapter.path.name,
                                 as_version=4)
        text = nbformat.writes(released)
        assert BEGIN_SOLUTION not in text and "BEGIN HIDDEN TESTS" not in text, chapter.name
        for student in students:
            folder = course / "submitted" / student / chapter.name
            folder.mkdir(parents=True)
            nbformat.write(make_submission(released, chapter, student), folder / chapter.path.name)
    nbgrader(course, "autograde", "*")
    nbgrader(course, "generate_feedback", "*")
    for chapter in chapters:
        for student in students:
            assert (course / "feedback" / student / chapter.name
                    / chapter.path.with_suffix(".html").name).exists(), (student, chapter.name)
    nbgrader(course, "export")
    with open(course / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {(row["assignment"], row["student_id"]): (float(row["score"]), float(row["max_score"]))
            for row in rows}


# --- make test's one run of a chapter, checked four ways -------------------------------

# After the exercises, a cell that draws random numbers: the toy's checks draw some too,
# so it prints what the committed run printed only if the proof puts the generators back.
AFTER = "print(torch.rand(3).tolist())"
SEEDED_CHECK = "_noise = torch.randn(5)  # a check that draws random numbers\n"


def toy_for_the_run(directory: Path):
    """The toy chapter, executed as a committed chapter is, then two outputs changed:
    one in an ordinary cell (nbval must flag it), one in an NBVAL_IGNORE_OUTPUT cell."""
    chapter = toy_chapter(directory)
    notebook = chapter.notebook
    notebook.cells[1].source += "\ntorch.manual_seed(0)\nprint('seeded')"
    for cell in notebook.cells:
        if exercise_cells.check_name(cell):
            cell.source = cell.source.replace("\n", "\n" + SEEDED_CHECK, 1)
    notebook.cells += [nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint('ignored')"),
                       nbformat.v4.new_code_cell("print('compared')"),
                       nbformat.v4.new_code_cell(AFTER)]
    from tools.notebooks import stamp_notebook

    stamp_notebook(notebook)
    execute.execute_notebook(notebook)
    notebook.cells[-3].outputs[0].text = "not what the run prints\n"   # ignored: passes
    notebook.cells[-2].outputs[0].text = "not what the run prints\n"   # compared: fails
    nbformat.write(notebook, chapter.path)
    return read_chapter(chapter.path)


def test_one_run_is_compared_proven_and_graded(tmp_path, pytester, monkeypatch):
    chapter = toy_for_the_run(tmp_path / "book")
    answers = tmp_path / "near_misses"
    answers.mkdir()
    wrong = {"ex1-double": {"returns x": "def double(x):\n    return x",
                            "the right answer": "def double(x):\n    return x + x"},
             "ex2-half": {"returns v": "def half(v):\n    return v",
                          "integer division": "def half(v):\n    return v // 2"},
             "ex3-norm": {"sum": "def norm(v):\n    return v.sum()",
                          "max": "def norm(v):\n    return v.abs().max()"},
             "ex4-rows": {"first row": "def rows(weight, ids):\n    return weight[0].expand(*ids.shape, -1)",
                          "one column": "def rows(weight, ids):\n    return weight[:, :1].expand(*ids.shape, -1)"}}
    (answers / "01_toy.py").write_text(f"NEAR_MISSES = {wrong!r}\n")
    monkeypatch.setattr(exercise_verify, "NEAR_MISSES", answers)
    monkeypatch.setattr(chapter_runs, "OUT", tmp_path / "out")
    monkeypatch.setattr(chapter_test, "JOBS", 1)
    result = pytester.runpytest_inprocess(str(chapter.path), "-p", "no:cacheprovider",
                                          "-rA", plugins=[chapter_test])
    # "PASSED path/01_toy.ipynb::Cell 3" -> {"Cell 3": "PASSED"}
    outcomes = {line.split("::", 1)[1].split(" - ")[0]: line.split()[0]
                for line in result.outlines
                if line.startswith(("PASSED ", "FAILED ", "ERROR ", "SKIPPED ")) and "::" in line}
    last = sum(cell.cell_type == "code" for cell in chapter.notebook.cells) - 1
    cell = "Cell {}".format
    report = "\n".join(result.outlines[-60:])
    assert outcomes.get(cell(last - 1)) == "FAILED", report    # the changed output
    assert "Cell outputs differ" in result.stdout.str()
    assert outcomes.get(cell(last - 2)) == "PASSED", report    # NBVAL_IGNORE_OUTPUT
    assert outcomes.get(cell(last)) == "PASSED", report        # after the proof: same numbers
    assert all(outcomes.get(cell(i)) == "PASSED" for i in range(last - 2)), report
    assert outcomes.get("exercises") == "FAILED", report
    passing = {line.strip() for line in result.outlines
               if line.strip().startswith("- check") and "passes on" in line}
    assert passing == {'- check `ex1-double` passes on near-miss "the right answer": it cannot '
                       'tell that answer from the solution'}, (passing, report)
    assert outcomes.get("nbgrader") == "PASSED", report


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


# --- the schedule of make test's chapter stage ----------------------------------------

def test_a_chapter_that_times_code_runs_with_nothing_beside_it(tmp_path, monkeypatch):
    """Appendix 14 asserts on speed ratios: it must not share the cores with another chapter.
    It keeps OpenMP's spinning threads; the chapters that share the cores get sleeping ones."""
    events: list[tuple[str, str]] = []
    policies: dict[str, str | None] = {}
    lock = threading.Lock()

    def pretend(self, run, *args):
        with lock:
            events.append(("start", run.chapter.name))
            policies[run.chapter.name] = args[-1].get("OMP_WAIT_POLICY")  # the run's env
        time.sleep(0.05)
        with lock:
            events.append(("end", run.chapter.name))

    monkeypatch.setattr(chapter_runs.Runner, "_execute", pretend)
    monkeypatch.setattr(chapter_runs.Runner, "_autograde", pretend)
    monkeypatch.setattr(chapter_runs.Runner, "_courses", lambda self, chapters: [tmp_path] * 2)
    monkeypatch.setattr(chapter_runs.Runner, "_feedback_and_export", lambda self, course, runs: None)
    monkeypatch.setattr(execute, "cores", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    chapters = [read_chapter(path) for path in sorted((ROOT / "chapters").glob("1[234]_*.ipynb"))]
    assert "14_benchmarks" in RUNS_ALONE
    runner = chapter_runs.Runner(chapters, jobs=2, out=tmp_path / "out")
    runner.start()
    for chapter in chapters:
        runner.wait(chapter.name)
    assert runner.error is None, runner.error
    running: set[str] = set()
    for kind, name in events:
        if kind == "start":
            assert not (running and ({name} | running) & RUNS_ALONE), (name, running)
            running.add(name)
        else:
            running.discard(name)
    assert sorted(name for kind, name in events if kind == "start") == sorted(c.name for c in chapters)
    assert policies == {"14_benchmarks": None, "12_distributed": "PASSIVE",
                        "13_refinements": "PASSIVE"}, policies


def test_chapters_that_share_the_cores_get_sleeping_threads(monkeypatch):
    """OpenMP threads sleep while they wait only where the pool's threads outnumber the cores;
    a policy the user set is kept."""
    monkeypatch.setattr(execute, "cores", lambda: 2)
    assert "OMP_WAIT_POLICY" not in execute.pool_env(1, {"OMP_NUM_THREADS": "2"})
    assert execute.pool_env(2, {"OMP_NUM_THREADS": "2"})["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in execute.pool_env(2, {"OMP_NUM_THREADS": "1"})
    assert execute.pool_env(2, {})["OMP_WAIT_POLICY"] == "PASSIVE"  # torch's default: every core
    assert execute.pool_env(2, {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"})[
        "OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.setattr(execute, "cores", lambda: 16)
    assert "OMP_WAIT_POLICY" not in execute.pool_env(8, {"OMP_NUM_THREADS": "2"})


def test_make_book_runs_the_timing_chapter_first_and_alone(tmp_path, monkeypatch):
    """`make book` follows the same order as the test stage: appendix 14 before the pool starts."""
    from tools import book

    events: list[str] = []

    class RecordingPool:  # stands in for the process pool: records when work is handed to it
        def __init__(self, max_workers, initializer, initargs):
            events.append("pool opens")
            workers_env.update(*initargs)  # what the pool's processes (and their kernels) get

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, path):
            from concurrent.futures import Future
            future: Future = Future()
            future.set_result(fn(path))
            return future

    def pretend(path):
        events.append(path.stem)
        return path, 0.0

    workers_env: dict[str, str] = {}
    monkeypatch.setattr(execute, "cores", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(book, "EXECUTED", tmp_path / "executed")
    monkeypatch.setattr(book, "ProcessPoolExecutor", RecordingPool)
    monkeypatch.setattr(book, "run", pretend)
    monkeypatch.setattr(book.website, "build", lambda executed: 0)
    chapters = sorted((ROOT / "chapters").glob("1[234]_*.ipynb"))
    assert book.main([str(p) for p in chapters] + ["--jobs", "2"]) == 0
    assert events[0] == "14_benchmarks" and events[1] == "pool opens", events
    assert sorted(events[2:]) == ["12_distributed", "13_refinements"]
    assert workers_env["OMP_WAIT_POLICY"] == "PASSIVE" and "OMP_WAIT_POLICY" not in os.environ


def test_the_chinese_edition_is_an_nbgrader_course_of_its_own(tmp_path):
    """`make student COURSE=dir LANGUAGE=zh`: the Chinese chapters, released by real
    nbgrader with their prose in Chinese and their checks the English ones; a solved copy
    scores full marks, an untouched one nothing, and `make grade` recognises the released
    Chinese copy as its chapter and agrees."""
    from tools import exercises, i18n
    from tools.i18n_catalogues import BUILD
    from tools.notebooks import read_book

    i18n.build(("01_embedding",))
    [chinese] = [c for c in read_book(BUILD / "chapters") if c.name == "01_embedding"]
    english = read_chapter(ROOT / "chapters" / "01_embedding.ipynb")
    course = tmp_path / "course"
    scores = run_course(course, [chinese], ["solved", "untouched"], language="zh")
    # autograde scores the checks, out of every point (the written answer waits for the teacher)
    full = float(sum(english.points[name] for name, _ in english.checks))
    total = float(sum(english.points.values()))
    assert scores == {("01_embedding", "solved"): (full, total),
                      ("01_embedding", "untouched"): (0.0, total)}, scores
    assert 'course_id = "transformer-book-zh"' in (course / "nbgrader_config.py").read_text()
    released = nbformat.read(course / "release" / "01_embedding" / "01_embedding.ipynb", as_version=4)
    prose = "".join(c.source for c in released.cells if c.cell_type == "markdown")
    assert "嵌入" in prose and released.metadata["i18n"]["language"] == "zh-CN"
    returned = tmp_path / "returned" / "solved"
    returned.mkdir(parents=True)
    nbformat.write(submission(released, chinese, "solved"), returned / "01_embedding.ipynb")
    assert exercises.main(["grade", str(returned.parent), "--out", str(tmp_path / "graded")]) == 0
    with open(tmp_path / "graded" / "summary.csv", newline="") as handle:
        [row] = list(csv.DictReader(handle))
    assert float(row["01_embedding"].split("/")[0]) == full, row
