"""Student copies, grading and the can-it-fail proof, on a small made-up chapter."""

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import exercises  # noqa: E402
from notebooks import read_book, read_chapter, solution_regions  # noqa: E402

SOLVED_1 = "def add(a, b):\n    ### BEGIN SOLUTION\n    total = a + b\n    return total\n    ### END SOLUTION"
SOLVED_2 = "def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION"
SOLVED_3 = "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION"
CHECK_1 = "#| check ex1-add\nassert add(2, 3) == 5"
CHECK_2 = "#| check ex2-square\nassert square(4) == 16"
CHECK_3 = "#| check ex3-answer\nassert answer == 42"


def write_chapter(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return path


@pytest.fixture
def chapter(tmp_path):
    """A solved chapter with three exercises, executed as a committed one would be."""
    path = write_chapter(tmp_path / "01_toy.ipynb",
                         ["x0 = 1", SOLVED_1, CHECK_1, SOLVED_2, CHECK_2, SOLVED_3, CHECK_3])
    nb = nbformat.read(path, as_version=4)
    nbformat.write(exercises.execute_notebook(nb), path)
    return read_chapter(path)


def test_strip_solutions_keeps_the_indent_and_drops_every_solution_line():
    stub = exercises.strip_solutions(SOLVED_1)
    assert stub == "def add(a, b):\n    raise NotImplementedError"
    assert exercises.strip_solutions(SOLVED_3) == "raise NotImplementedError"


def test_every_chapter_student_copy_holds_no_solution_text():
    for chapter in read_book():
        student = exercises.student_copy(chapter.notebook)
        for cell, original in zip(student.cells, chapter.notebook.cells, strict=True):
            if original.cell_type != "code":
                continue
            lines = original.source.splitlines()
            outside = {line.strip() for i, line in enumerate(lines)
                       if not any(b <= i <= e for b, e in solution_regions(original.source))}
            for begin, end in solution_regions(original.source):
                for line in lines[begin:end + 1]:
                    if line.strip() and line.strip() not in outside:
                        assert line not in cell.source.splitlines(), (chapter.rel, line)
            assert "BEGIN SOLUTION" not in cell.source
            assert cell.outputs == [] and cell.execution_count is None


# Two wrong answers per exercise, as tests/near_misses/NN_name.py records them.
NEAR_MISSES = {
    "ex1-add": {"subtracts": "def add(a, b):\n    return a - b",
                "multiplies": "def add(a, b):\n    return a * b"},
    "ex2-square": {"doubles": "def square(x):\n    return 2 * x",
                   "cubes": "def square(x):\n    return x ** 3"},
    "ex3-answer": {"off by one": "answer = 41", "a string": "answer = '42'"},
}


def test_solutions_pass_and_stubs_and_near_misses_fail(chapter):
    assert exercises.structure_problems(chapter) == []
    solved = exercises.grade(chapter.notebook, chapter)
    assert [(r.name, r.passed) for r in solved] == [
        ("ex1-add", True), ("ex2-square", True), ("ex3-answer", True)]
    assert exercises.verify(chapter, answers=NEAR_MISSES) == []


def test_verify_flags_a_near_miss_that_the_check_lets_through(chapter):
    answers = {**NEAR_MISSES, "ex2-square": {**NEAR_MISSES["ex2-square"],
                                             "abs-square": "def square(x):\n    return abs(x) * x"}}
    assert exercises.verify(chapter, answers=answers) == [
        'check `ex2-square` passes on near-miss "abs-square": it cannot tell that answer '
        "from the solution"]


def test_a_wrong_answer_cannot_pass_on_what_the_solution_left_behind(chapter):
    # The stub of `answer = 42` raises before assigning: unless verify forgets the
    # solution's `answer` first, the check would still see 42 and pass.
    answers = {**NEAR_MISSES, "ex3-answer": {"assigns nothing": "pass", "off by one": "answer = 41"}}
    problems = exercises.verify(chapter, answers=answers)
    assert problems == [], problems


def test_verify_wants_two_near_misses_per_check_and_known_names(chapter):
    answers = {"ex1-add": NEAR_MISSES["ex1-add"], "ex2-square": {"doubles": "def square(x):\n    return 2 * x"},
               "ex9-nothing": {"a": "x = 1"}}
    problems = exercises.verify(chapter, answers=answers)
    assert any("names `ex9-nothing`, which is no check" in p for p in problems), problems
    assert any("`ex2-square` has 1 near-miss" in p for p in problems), problems
    assert any("`ex3-answer` has 0 near-miss" in p for p in problems), problems


def test_defined_names_covers_defs_imports_and_assignments():
    source = "import torch.nn as nn\nfrom math import pi\ndef f():\n    y = 1\nclass C: pass\na, (b, c) = 1, (2, 3)\nfor i in range(2):\n    z = i"
    assert exercises.defined_names(source) == ["C", "a", "b", "c", "f", "i", "nn", "pi", "z"]


def test_grading_reports_each_exercise_and_does_not_stop_at_the_first_failure(chapter):
    student = exercises.student_copy(chapter.notebook)
    # The student solves exercises 2 and 3 (3 wrongly) and leaves 1 as the stub.
    student.cells[3].source = "def square(x):\n    return x * x"
    student.cells[5].source = "answer = 41"
    results = {r.name: r for r in exercises.grade(student, chapter)}
    assert not results["ex1-add"].passed and "NotImplementedError" in results["ex1-add"].detail
    assert results["ex2-square"].passed
    assert not results["ex3-answer"].passed and "AssertionError" in results["ex3-answer"].detail


def test_grading_uses_the_chapters_checks_not_the_students(chapter):
    student = exercises.student_copy(chapter.notebook)
    student.cells[2].source = "#| check ex1-add\npass  # a check edited to pass"
    del student.cells[6]  # and one deleted
    results = {r.name: r for r in exercises.grade(student, chapter)}
    assert not results["ex1-add"].passed
    assert not results["ex3-answer"].passed and "missing" in results["ex3-answer"].detail


def test_verify_flags_a_check_that_cannot_fail(tmp_path):
    path = write_chapter(tmp_path / "02_vacuous.ipynb",
                         [SOLVED_1, "#| check ex1-add\nassert True", SOLVED_2, CHECK_2,
                          SOLVED_3, CHECK_3])
    nbformat.write(exercises.execute_notebook(nbformat.read(path, as_version=4)), path)
    problems = exercises.verify(read_chapter(path), answers=NEAR_MISSES)
    assert problems == ["check `ex1-add` passes on the student stub: it cannot tell that "
                        "answer from the solution",
                        'check `ex1-add` passes on near-miss "subtracts": it cannot tell that '
                        "answer from the solution",
                        'check `ex1-add` passes on near-miss "multiplies": it cannot tell that '
                        "answer from the solution"]


def test_a_check_that_writes_to_stderr_is_flagged_since_nbgrader_fails_it(tmp_path):
    noisy = "#| check ex1-add\nimport sys\nprint('careful', file=sys.stderr)\nassert add(2, 3) == 5"
    path = write_chapter(tmp_path / "04_noisy.ipynb", [SOLVED_1, noisy, SOLVED_2, CHECK_2, SOLVED_3, CHECK_3])
    nbformat.write(exercises.execute_notebook(nbformat.read(path, as_version=4)), path)
    assert exercises.structure_problems(read_chapter(path)) == [
        "check `ex1-add` writes to stderr on the solution ('careful'), which nbgrader grades as "
        "a failure: silence it or move it out of the check"]


def test_structure_rules(tmp_path):
    path = write_chapter(tmp_path / "03_bad.ipynb", [SOLVED_1, SOLVED_2, CHECK_2])
    problems = exercises.structure_problems(read_chapter(path))
    assert any("solution with no `#| check`" in p for p in problems)
    assert any("2 exercises" in p for p in problems)
    assert any("was not executed" in p for p in problems)


# --- nbgrader metadata (make stamp) -------------------------------------------------

def test_stamp_derives_nbgrader_metadata_from_the_conventions(chapter):
    from notebooks import nbgrader_metadata

    notebook = chapter.notebook
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell("# 01 · Toy"))
    notebook.cells[7].source = notebook.cells[7].source.replace(
        "#| check ex3-answer", "#| check ex3-answer points=2.5")
    metas = nbgrader_metadata(notebook)
    assert metas[0] is None  # markdown: no metadata
    assert metas[1] == {"grade": False, "grade_id": f"cell-{notebook.cells[1].id}", "locked": True,
                        "schema_version": 3, "solution": False, "task": False}
    assert metas[2] == {"grade": False, "grade_id": "ex1-add-solution", "locked": False,
                        "schema_version": 3, "solution": True, "task": False}
    assert metas[3] == {"grade": True, "grade_id": "ex1-add", "locked": True, "points": 1,
                        "schema_version": 3, "solution": False, "task": False}
    assert metas[7]["points"] == 2.5 and metas[7]["grade_id"] == "ex3-answer"


def test_stamp_is_idempotent_and_check_names_the_chapter_and_the_fix(chapter):
    from notebooks import stamp_notebook

    assert exercises.stamp_problems(chapter) and "run `make stamp`" in exercises.stamp_problems(chapter)[0]
    changes = exercises.stamp_chapter(chapter)
    assert changes and any("kernelspec" in c for c in changes) is False  # toy already names python3
    again = read_chapter(chapter.path)
    assert exercises.stamp_problems(again) == []
    assert stamp_notebook(again.notebook) == []  # idempotent
    # a cell added later (as jupytext --sync adds one) is caught, naming chapter and fix
    again.notebook.cells.append(nbformat.v4.new_code_cell("x = 2"))
    nbformat.write(again.notebook, again.path)
    problems = exercises.stamp_problems(read_chapter(again.path))
    assert len(problems) == 1 and problems[0].startswith(f"{again.rel}: 1 cells lack nbgrader metadata")


def test_stamp_check_flags_marker_text_in_markdown_and_a_stale_kernel(tmp_path):
    path = write_chapter(tmp_path / "05_prose.ipynb", [SOLVED_1, CHECK_1])
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("Write between `### BEGIN SOLUTION` and the end."))
    nb.metadata["kernelspec"]["name"] = "transformer-book"
    nbformat.write(nb, path)
    problems = exercises.stamp_problems(read_chapter(path))
    assert any("cell 0 (markdown), line 1: nbgrader's marker text" in p for p in problems), problems
    assert any("the kernelspec names 'transformer-book', not 'python3'" in p for p in problems)


def test_points_syntax_is_strict():
    from notebooks import BookError, parse_check

    assert parse_check("ex4-leak points=2") == ("ex4-leak", 2)
    assert parse_check("ex4-leak") == ("ex4-leak", 1)
    for bad in ["", "ex4 leak", "ex4-leak points=0", "ex4-leak points=two", "ex4/leak"]:
        with pytest.raises(BookError):
            parse_check(bad)


def test_every_chapter_is_stamped_for_nbgrader():
    chapters = read_book()
    problems = [p for chapter in chapters for p in exercises.stamp_problems(chapter)]
    problems += exercises.table_problems(chapters)  # the teacher's page lists every exercise
    assert problems == [], "\n".join(problems)


def test_the_teachers_table_lists_each_exercise_with_its_points(tmp_path):
    from toy_chapter import toy_chapter

    table = exercises.exercise_table([toy_chapter(tmp_path)])
    assert "| {doc}`01 · Toy </chapters/01_toy>` (4 points) | ex1-double | `ex1-double` | 1 |" in table
    assert "|  | ex2-half | `ex2-half` | 2 |" in table
    assert table.endswith("| **1 chapters** | **3 exercises** | | **4** |")


def test_the_python3_kernel_runs_this_environments_python():
    """The kernel the notebooks name resolves to the Python that runs Jupyter (make lab,
    nbgrader and the graders all start from the project's environment)."""
    from jupyter_client.manager import KernelManager

    command = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert command[0] == sys.executable, command


# --- student copies (make student) ------------------------------------------------------

def test_student_copy_strips_hidden_tests_and_locks_cells_as_nbgrader_does(tmp_path):
    from toy_chapter import toy_chapter

    toy = toy_chapter(tmp_path)
    student = exercises.student_copy(toy.notebook, toy.name)
    text = nbformat.writes(student)
    assert "HIDDEN" not in text and "torch.zeros(2)" not in text and "BEGIN SOLUTION" not in text
    check = next(c for c in student.cells if exercises.check_name(c) == "ex3-norm")
    assert "torch.testing.assert_close(_n, torch.tensor(5.0))" in check.source
    assert check.metadata["editable"] is False and check.metadata["deletable"] is False
    solution = next(c for c in student.cells if c.metadata.get("nbgrader", {}).get("solution"))
    assert "editable" not in solution.metadata and solution.metadata["deletable"] is False
    assert student.metadata["transformer_book"]["chapter"] == "01_toy"


def test_make_student_never_overwrites_an_edited_copy_unless_forced(chapter, tmp_path, capsys):
    out = tmp_path / "student"
    assert exercises.write_student_copies([chapter], out) == 0
    target = out / chapter.path.name
    assert exercises.write_student_copies([chapter], out) == 0  # unchanged: nothing to do
    assert "unchanged" in capsys.readouterr().out
    work = nbformat.read(target, as_version=4)
    work.cells[1].source = "def add(a, b):\n    return a + b  # my answer"
    nbformat.write(work, target)
    assert exercises.write_student_copies([chapter], out) == 1
    assert "my answer" in target.read_text()
    assert "make student FORCE=1" in capsys.readouterr().err
    assert exercises.write_student_copies([chapter], out, force=True) == 0
    assert "my answer" not in target.read_text()
    # an untouched copy of an older version of the chapter is simply updated
    old = nbformat.read(target, as_version=4)
    old.cells[0].source = "x0 = 0  # the chapter as it was"
    old.metadata["transformer_book"]["student_copy"] = exercises.content_hash(old)
    nbformat.write(old, target)
    assert exercises.write_student_copies([chapter], out) == 0
    assert "as it was" not in target.read_text()


# --- grading ------------------------------------------------------------------------------

def test_grading_restores_locked_cells_as_nbgrader_does(chapter):
    from notebooks import stamp_notebook

    stamp_notebook(chapter.notebook)  # as every committed chapter is
    student = exercises.student_copy(chapter.notebook)
    student.cells[1].source = SOLVED_1.replace("a + b", "a * b")  # wrong answer to ex1
    student.cells[0].source = "x0 = 1\nassert_ = None"  # edits in a locked cell are discarded...
    student.cells.insert(1, nbformat.v4.new_code_cell("def square(x):\n    return x * x"))
    graded, present = exercises.graded_notebook(student, chapter)
    assert graded.cells[0].source == "x0 = 1" and present == {"ex1-add", "ex2-square", "ex3-answer"}
    assert graded.cells[1].source.startswith("def square")  # ...cells a student adds stay


def test_the_guard_stops_a_patched_torch_that_fools_an_unguarded_grader(tmp_path):
    from toy_chapter import CHEATS, toy_chapter

    toy = toy_chapter(tmp_path)
    for cheat, answers in CHEATS.items():
        student = exercises.student_copy(toy.notebook, toy.name)
        for cell in student.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if grade_id.endswith("-solution"):
                cell.source = answers[grade_id.removesuffix("-solution")]
        unguarded = exercises.grade(student, toy, guard=False)
        assert all(r.passed for r in unguarded), (cheat, unguarded)  # the cheat works without it
        guarded = exercises.grade(student, toy)
        assert not any(r.passed for r in guarded), (cheat, guarded)
        assert sum(r.max_points for r in guarded) == 4


def test_the_guard_refuses_a_shadowed_builtin_and_a_rebound_reference(tmp_path):
    from toy_chapter import toy_chapter

    toy = toy_chapter(tmp_path)
    student = exercises.student_copy(toy.notebook, toy.name)
    answers = {  # what torch does to itself (a rewrapped manual_seed, a cache) is no cheat
               "ex1-double": "def double(x):\n    return 2 * x\n"
                             "import copy\nimport torch._dynamo\n_ = copy.deepcopy(torch.zeros(2))",
               "ex2-half": "def half(v):\n    return v\nabs = lambda x: 0\n"
                           "import types\nmath = types.SimpleNamespace(isclose=lambda *a: True)",
               "ex3-norm": "def norm(v):\n    return torch.linalg.vector_norm(v)\ntorch = None"}
    for cell in student.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.endswith("-solution"):
            cell.source = answers[grade_id.removesuffix("-solution")]
    results = {r.name: r for r in exercises.grade(student, toy)}
    assert results["ex1-double"].passed, results["ex1-double"]
    assert "rebinds `abs`" in results["ex2-half"].detail and "rebinds `math`" in results["ex2-half"].detail
    assert "rebinds `torch`" in results["ex3-norm"].detail


# --- the gradebook (make grade) ------------------------------------------------------------

def test_gradebook_grades_a_folder_in_parallel_and_recognises_chapters(tmp_path):
    """Any file names; chapter from metadata, checks or title; a crash or a stray file
    becomes a row, not a stop."""
    import csv

    from notebooks import stamp_notebook
    from toy_chapter import toy_chapter

    book = tmp_path / "book"
    toy = toy_chapter(book)
    second = write_chapter(book / "02_add.ipynb", [SOLVED_1, CHECK_1, SOLVED_2, CHECK_2, SOLVED_3, CHECK_3])
    nb = nbformat.read(second, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# 02 · Adding things"))
    stamp_notebook(nb)
    nbformat.write(nb, second)
    add = read_chapter(second)

    returned = tmp_path / "returned"
    (returned / "alice").mkdir(parents=True)
    (returned / "carol").mkdir()
    (returned / "dave").mkdir()
    solved = exercises.student_copy(toy.notebook, toy.name)
    for cell, original in zip(solved.cells, toy.notebook.cells, strict=True):
        if original.metadata.get("nbgrader", {}).get("solution"):
            cell.source = original.source  # markers and all: still the solution
    nbformat.write(solved, returned / "alice" / "my work (final).ipynb")
    untouched = exercises.student_copy(toy.notebook)  # as nbgrader releases it: no chapter recorded
    del untouched.metadata["transformer_book"]
    nbformat.write(untouched, returned / "bob_toy.ipynb")
    by_title = exercises.student_copy(add.notebook)
    del by_title.metadata["transformer_book"]
    for cell in by_title.cells:
        cell.metadata.pop("nbgrader", None)
    by_title.cells = [c for c in by_title.cells if not exercises.check_name(c)]  # checks deleted
    nbformat.write(by_title, returned / "carol" / "02.ipynb")
    crash = nbformat.from_dict(solved)
    crash.cells[4].source = "import os\nos._exit(1)"  # kills its kernel in exercise 2
    nbformat.write(crash, returned / "dave" / "toy.ipynb")
    (returned / "junk.ipynb").write_text("not a notebook")

    out = tmp_path / "graded"
    status = exercises.main(["grade", str(returned), "--jobs", "2", "--out", str(out),
                             "--book", str(book), "--timeout", "300"])
    assert status == 1  # one file could not be graded
    with open(out / "gradebook.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["file", "student", "chapter", "exercise", "status", "points",
                             "max_points", "message"]
    got = {(r["student"], r["exercise"]): (r["status"], float(r["points"]), r["message"]) for r in rows}
    assert got[("alice", "ex1-double")][:2] == ("passed", 1) and got[("alice", "ex2-half")][:2] == ("passed", 2)
    assert got[("bob", "ex2-half")][0] == "failed" and "not attempted" in got[("bob", "ex2-half")][2]
    assert got[("carol", "ex1-add")] == ("failed", 0, "check cell missing from the notebook")
    assert got[("dave", "ex1-double")][0] == "passed"
    assert got[("dave", "ex2-half")][0] == "failed" and "kernel died" in got[("dave", "ex2-half")][2]
    assert got[("junk", "")][0] == "not graded" and "not a readable notebook" in got[("junk", "")][2]
    with open(out / "summary.csv", newline="") as handle:
        summary = {r["student"]: r for r in csv.DictReader(handle)}
    assert summary["alice"]["01_toy"] == "4/4" and summary["alice"]["percent"] == "100"
    assert summary["bob"]["points"] == "0" and summary["dave"]["01_toy"] == "1/4"


def test_self_check_reports_each_exercise_without_the_hidden_tests(tmp_path, capsys):
    from toy_chapter import toy_chapter

    toy = toy_chapter(tmp_path / "book")
    copy = exercises.student_copy(toy.notebook, toy.name)
    for cell in copy.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex3-norm-solution":
            cell.source = "def norm(v):\n    return torch.tensor(5.0)  # right on the visible test only"
    path = tmp_path / "04 mine.ipynb"
    nbformat.write(copy, path)
    assert exercises.main(["check", str(path), "--chapter", str(toy.path)]) == 1
    out = capsys.readouterr().out
    assert "hidden tests are not run" in out
    assert "FAILED  ex1-double  (not attempted: the solution still raises NotImplementedError)" in out
    assert "passed  ex3-norm" in out and "1 of 3 exercises passed (1 of 4 points)" in out
    graded = {r.name: r.passed for r in exercises.grade(copy, toy)}  # the teacher's grading
    assert graded["ex3-norm"] is False


def test_jupytext_sync_keeps_nbgrader_metadata_and_stamp_covers_new_cells(tmp_path):
    """The .py pairs carry no nbgrader metadata (cell_metadata_filter = "tags,-all"), so a
    chapter edited in its .py gets it back from the .ipynb: jupytext keeps the metadata of
    the cells it matches; a new cell has none until `make sync` / `make execute` stamps it."""
    import shutil
    import subprocess

    from notebooks import stamp_notebook

    for name in ("04_causal_mask.ipynb", "04_causal_mask.py"):
        shutil.copy(ROOT / "chapters" / name, tmp_path / name)
    shutil.copy(ROOT / "jupytext.toml", tmp_path / "jupytext.toml")
    script = tmp_path / "04_causal_mask.py"
    assert "nbgrader" not in script.read_text()
    text = script.read_text().replace("#| check ex1-causal\n", "#| check ex1-causal points=3\n")
    script.write_text(text.replace("# %% [markdown]\n# ## Exercises", "# %%\nnew_cell = 1\n\n"
                                   "# %% [markdown]\n# ## Exercises", 1))
    subprocess.run([sys.executable, "-m", "jupytext", "--quiet", "--sync", str(script)],
                   check=True, cwd=tmp_path)
    synced = nbformat.read(tmp_path / "04_causal_mask.ipynb", as_version=4)
    unstamped = [c.source for c in synced.cells if c.cell_type == "code" and "nbgrader" not in c.metadata]
    assert unstamped == ["new_cell = 1"]
    changes = stamp_notebook(synced)
    assert len(changes) == 2, changes  # the new cell, and ex1-causal with its new points
    check = next(c for c in synced.cells if exercises.check_name(c) == "ex1-causal")
    assert check.metadata["nbgrader"]["points"] == 3
