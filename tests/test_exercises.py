"""Student copies, grading and the can-it-fail proof, on a small made-up chapter."""

import sys
from pathlib import Path

import nbformat
import pytest

from tools import (
    execute,
    exercise_cells,
    exercise_table,
    exercise_verify,
    exercises,
    grading,
    stamping,
    student_copies,
)
from tools.notebooks import read_book, read_chapter, solution_regions

ROOT = Path(__file__).resolve().parent.parent

SOLVED_1 = "def add(a, b):\n    ### BEGIN SOLUTION\n    total = a + b\n    return total\n    ### END SOLUTION"
SOLVED_2 = "def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION"
SOLVED_3 = "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION"
SOLVED_4 = "def neg(x):\n    ### BEGIN SOLUTION\n    return -x\n    ### END SOLUTION"


def hidden(test: str) -> str:
    return f"### BEGIN HIDDEN TESTS\n{test}\n### END HIDDEN TESTS"


CHECK_1 = f"#| check ex1-add\nassert add(2, 3) == 5\n{hidden('assert add(-1, 1) == 0')}"
CHECK_2 = f"#| check ex2-square\nassert square(4) == 16\n{hidden('assert square(0) == 0')}"
CHECK_3 = f"#| check ex3-answer\nassert answer == 42\n{hidden('assert type(answer) is int')}"
CHECK_4 = f"#| check ex4-neg\nassert neg(2) == -2\n{hidden('assert neg(-5) == 5')}"


def write_chapter(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return path


@pytest.fixture
def chapter(tmp_path):
    """A solved chapter with four exercises, executed as a committed one would be."""
    path = write_chapter(tmp_path / "01_toy.ipynb",
                         ["x0 = 1", SOLVED_1, CHECK_1, SOLVED_2, CHECK_2, SOLVED_3, CHECK_3,
                          SOLVED_4, CHECK_4])
    nb = nbformat.read(path, as_version=4)
    nbformat.write(execute.execute_notebook(nb), path)
    return read_chapter(path)


def test_strip_solutions_keeps_the_indent_and_drops_every_solution_line():
    stub = exercise_cells.strip_solutions(SOLVED_1)
    assert stub == "def add(a, b):\n    raise NotImplementedError"
    assert exercise_cells.strip_solutions(SOLVED_3) == "raise NotImplementedError"


def test_every_chapter_student_copy_holds_no_solution_text():
    for chapter in read_book():
        student = student_copies.student_copy(chapter.notebook)
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
    "ex4-neg": {"abs": "def neg(x):\n    return -abs(x)", "identity": "def neg(x):\n    return x"},
}


def test_solutions_pass_and_stubs_and_near_misses_fail(chapter):
    assert exercise_verify.structure_problems(chapter) == []
    solved = grading.grade(chapter.notebook, chapter)
    assert [(r.name, r.passed) for r in solved] == [
        ("ex1-add", True), ("ex2-square", True), ("ex3-answer", True), ("ex4-neg", True)]
    assert exercise_verify.verify(chapter, answers=NEAR_MISSES) == []


def test_verify_flags_a_near_miss_that_the_check_lets_through(chapter):
    answers = {**NEAR_MISSES, "ex2-square": {**NEAR_MISSES["ex2-square"],
                                             "abs-square": "def square(x):\n    return abs(x) * x"}}
    assert exercise_verify.verify(chapter, answers=answers) == [
        'check `ex2-square` passes on near-miss "abs-square": it cannot tell that answer '
        "from the solution"]


def test_a_wrong_answer_cannot_pass_on_what_the_solution_left_behind(chapter):
    # The stub of `answer = 42` raises before assigning: unless verify forgets the
    # solution's `answer` first, the check would still see 42 and pass.
    answers = {**NEAR_MISSES, "ex3-answer": {"assigns nothing": "pass", "off by one": "answer = 41"}}
    problems = exercise_verify.verify(chapter, answers=answers)
    assert problems == [], problems


def test_verify_wants_two_near_misses_per_check_and_known_names(chapter):
    answers = {"ex1-add": NEAR_MISSES["ex1-add"], "ex2-square": {"doubles": "def square(x):\n    return 2 * x"},
               "ex9-nothing": {"a": "x = 1"}}
    problems = exercise_verify.verify(chapter, answers=answers)
    assert any("names `ex9-nothing`, which is no check" in p for p in problems), problems
    assert any("`ex2-square` has 1 near-miss" in p for p in problems), problems
    assert any("`ex3-answer` has 0 near-miss" in p for p in problems), problems


def test_defined_names_covers_defs_imports_and_assignments():
    source = "import torch.nn as nn\nfrom math import pi\ndef f():\n    y = 1\nclass C: pass\na, (b, c) = 1, (2, 3)\nfor i in range(2):\n    z = i"
    assert exercise_cells.defined_names(source) == ["C", "a", "b", "c", "f", "i", "nn", "pi", "z"]


def test_grading_reports_each_exercise_and_does_not_stop_at_the_first_failure(chapter):
    student = student_copies.student_copy(chapter.notebook)
    # The student solves exercises 2 and 3 (3 wrongly) and leaves 1 and 4 as the stub.
    student.cells[3].source = "def square(x):\n    return x * x"
    student.cells[5].source = "answer = 41"
    results = {r.name: r for r in grading.grade(student, chapter)}
    assert not results["ex1-add"].passed and "NotImplementedError" in results["ex1-add"].detail
    assert results["ex2-square"].passed
    assert not results["ex3-answer"].passed and "AssertionError" in results["ex3-answer"].detail


def test_grading_uses_the_chapters_checks_not_the_students(chapter):
    student = student_copies.student_copy(chapter.notebook)
    student.cells[2].source = "#| check ex1-add\npass  # a check edited to pass"
    del student.cells[6]  # and one deleted (ex3-answer)
    results = {r.name: r for r in grading.grade(student, chapter)}
    assert not results["ex1-add"].passed
    assert not results["ex3-answer"].passed and "missing" in results["ex3-answer"].detail


def test_verify_flags_a_check_that_cannot_fail(tmp_path):
    path = write_chapter(tmp_path / "02_vacuous.ipynb",
                         [SOLVED_1, f"#| check ex1-add\nassert True\n{hidden('pass')}", SOLVED_2,
                          CHECK_2, SOLVED_3, CHECK_3, SOLVED_4, CHECK_4])
    nbformat.write(execute.execute_notebook(nbformat.read(path, as_version=4)), path)
    problems = exercise_verify.verify(read_chapter(path), answers=NEAR_MISSES)
    assert problems == ["check `ex1-add` passes on the student stub: it cannot tell that "
                        "answer from the solution",
                        'check `ex1-add` passes on near-miss "subtracts": it cannot tell that '
                        "answer from the solution",
                        'check `ex1-add` passes on near-miss "multiplies": it cannot tell that '
                        "answer from the solution"]


def test_a_check_that_writes_to_stderr_is_flagged_since_nbgrader_fails_it(tmp_path):
    noisy = CHECK_1.replace("\nassert", "\nimport sys\nprint('careful', file=sys.stderr)\nassert", 1)
    path = write_chapter(tmp_path / "04_noisy.ipynb",
                         [SOLVED_1, noisy, SOLVED_2, CHECK_2, SOLVED_3, CHECK_3, SOLVED_4, CHECK_4])
    nbformat.write(execute.execute_notebook(nbformat.read(path, as_version=4)), path)
    assert exercise_verify.structure_problems(read_chapter(path)) == [
        "check `ex1-add` writes to stderr on the solution ('careful'), which nbgrader grades as "
        "a failure: silence it or move it out of the check"]


def test_structure_rules(tmp_path):
    path = write_chapter(tmp_path / "03_bad.ipynb",
                         [SOLVED_1, SOLVED_2, CHECK_2, SOLVED_3, "#| check ex3-answer\nassert answer == 42"])
    problems = exercise_verify.structure_problems(read_chapter(path))
    assert any("solution with no `#| check`" in p for p in problems)
    assert any("2 exercises; a chapter needs at least 4" in p for p in problems)
    assert any("was not executed" in p for p in problems)
    assert any("check `ex3-answer` has no hidden tests" in p for p in problems), problems


def test_verify_wants_the_visible_part_alone_to_pass_and_references_it_can_trust(chapter, tmp_path):
    """A check whose visible part needs a name bound in its hidden tests breaks in a
    student's copy; a check that compares against a function the notebook defines can be
    fooled by a student's cell that redefines it."""
    broken = "#| check ex1-add\n" + hidden("_want = 5") + "\nassert add(2, 3) == _want"
    fooled = "#| check ex2-square\nassert square(4) == reference(4)\n" + hidden("assert square(3) == 9")
    path = write_chapter(tmp_path / "05_refs.ipynb",
                         ["def reference(x):\n    return x * x", SOLVED_1, broken, SOLVED_2, fooled,
                          SOLVED_3, CHECK_3, SOLVED_4, CHECK_4])
    nbformat.write(execute.execute_notebook(nbformat.read(path, as_version=4)), path)
    problems = exercise_verify.verify(read_chapter(path), answers=NEAR_MISSES)
    assert any("check `ex1-add` without its hidden tests (as a student copy shows it) fails on "
               "the solution: NameError" in p for p in problems), problems
    assert any("check `ex2-square` reads `reference`, which the notebook defines" in p
               for p in problems), problems


# --- nbgrader metadata (make sync) -------------------------------------------------

def test_stamp_derives_nbgrader_metadata_from_the_conventions(chapter):
    from tools.notebooks import nbgrader_metadata

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
    from tools.notebooks import stamp_notebook

    assert stamping.stamp_problems(chapter) and "run `make sync`" in stamping.stamp_problems(chapter)[0]
    changes = stamping.stamp_chapter(chapter)
    assert changes and any("kernelspec" in c for c in changes) is False  # toy already names python3
    again = read_chapter(chapter.path)
    assert stamping.stamp_problems(again) == []
    assert stamp_notebook(again.notebook) == []  # idempotent
    # a cell added later (as jupytext --sync adds one) is caught, naming chapter and fix
    again.notebook.cells.append(nbformat.v4.new_code_cell("x = 2"))
    nbformat.write(again.notebook, again.path)
    problems = stamping.stamp_problems(read_chapter(again.path))
    assert len(problems) == 1 and problems[0].startswith(f"{again.rel}: 1 cells lack nbgrader metadata")


def test_stamp_check_flags_marker_text_in_markdown_and_a_stale_kernel(tmp_path):
    path = write_chapter(tmp_path / "05_prose.ipynb", [SOLVED_1, CHECK_1])
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("Write between `### BEGIN SOLUTION` and the end."))
    nb.metadata["kernelspec"]["name"] = "transformer-book"
    nbformat.write(nb, path)
    problems = stamping.stamp_problems(read_chapter(path))
    assert any("cell 0 (markdown), line 1: nbgrader's marker text" in p for p in problems), problems
    assert any("the kernelspec names 'transformer-book', not 'python3'" in p for p in problems)


def test_points_syntax_is_strict():
    from tools.notebooks import BookError, parse_check

    assert parse_check("ex4-leak points=2") == ("ex4-leak", 2)
    assert parse_check("ex4-leak") == ("ex4-leak", 1)
    for bad in ["", "ex4 leak", "ex4-leak points=0", "ex4-leak points=two", "ex4/leak"]:
        with pytest.raises(BookError):
            parse_check(bad)


def test_every_chapter_is_stamped_for_nbgrader():
    chapters = read_book()
    problems = [p for chapter in chapters for p in stamping.stamp_problems(chapter)]
    problems += exercise_table.table_problems(chapters)  # the teacher's page lists every exercise
    assert problems == [], "\n".join(problems)


def test_the_teachers_table_lists_each_exercise_with_its_points(tmp_path):
    from toy_chapter import toy_chapter

    table = exercise_table.exercise_table([toy_chapter(tmp_path)])
    assert "| {doc}`01 · Toy </chapters/01_toy>` (7 points) | 1 · Double | `ex1-double` | 1 |" in table
    assert "|  | 2 · Half | `ex2-half` | 2 |" in table
    assert "|  | 4 · Rows of a table | `ex4-why` (written, graded by hand) | 2 |" in table
    assert table.endswith("| **1 chapters** | **4 exercises** | | **7** |")


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
    student = student_copies.student_copy(toy.notebook, toy.name)
    text = nbformat.writes(student)
    assert "HIDDEN" not in text and "torch.zeros(2)" not in text and "BEGIN SOLUTION" not in text
    check = next(c for c in student.cells if exercise_cells.check_name(c) == "ex3-norm")
    assert "torch.testing.assert_close(_n, torch.tensor(5.0))" in check.source
    assert check.metadata["editable"] is False and check.metadata["deletable"] is False
    solution = next(c for c in student.cells if c.metadata.get("nbgrader", {}).get("solution"))
    assert "editable" not in solution.metadata and solution.metadata["deletable"] is False
    assert student.metadata["transformer_book"]["chapter"] == "01_toy"
    answer = next(c for c in student.cells if c.cell_type == "markdown" and "#| answer" in c.source)
    assert answer.source == "<!-- #| answer ex4-why points=2 -->\nYOUR ANSWER HERE"  # model answer gone
    assert answer.metadata["nbgrader"] == {"grade": True, "grade_id": "ex4-why", "locked": False,
                                           "points": 2, "schema_version": 3, "solution": True,
                                           "task": False}
    assert "single 1" not in text


def test_make_student_never_overwrites_an_edited_copy_unless_forced(chapter, tmp_path, capsys):
    out = tmp_path / "student"
    assert student_copies.write_student_copies([chapter], out) == 0
    target = out / chapter.path.name
    assert student_copies.write_student_copies([chapter], out) == 0  # unchanged: nothing to do
    assert "unchanged" in capsys.readouterr().out
    work = nbformat.read(target, as_version=4)
    work.cells[1].source = "def add(a, b):\n    return a + b  # my answer"
    nbformat.write(work, target)
    assert student_copies.write_student_copies([chapter], out) == 1
    assert "my answer" in target.read_text()
    assert "make student FORCE=1" in capsys.readouterr().err
    assert student_copies.write_student_copies([chapter], out, force=True) == 0
    assert "my answer" not in target.read_text()
    # an untouched copy of an older version of the chapter is simply updated
    old = nbformat.read(target, as_version=4)
    old.cells[0].source = "x0 = 0  # the chapter as it was"
    old.metadata["transformer_book"]["student_copy"] = student_copies.content_hash(old)
    nbformat.write(old, target)
    assert student_copies.write_student_copies([chapter], out) == 0
    assert "as it was" not in target.read_text()


# --- grading ------------------------------------------------------------------------------

def test_grading_restores_locked_cells_as_nbgrader_does(chapter):
    from tools.notebooks import stamp_notebook

    stamp_notebook(chapter.notebook)  # as every committed chapter is
    student = student_copies.student_copy(chapter.notebook)
    student.cells[1].source = SOLVED_1.replace("a + b", "a * b")  # wrong answer to ex1
    student.cells[0].source = "x0 = 1\nassert_ = None"  # edits in a locked cell are discarded...
    student.cells.insert(1, nbformat.v4.new_code_cell("def square(x):\n    return x * x"))
    graded, present = grading.graded_notebook(student, chapter)
    assert graded.cells[0].source == "x0 = 1"
    assert present == {"ex1-add", "ex2-square", "ex3-answer", "ex4-neg"}
    assert graded.cells[1].source.startswith("def square")  # ...cells a student adds stay


def answered(chapter, answers: dict[str, str]):
    """A student copy of `chapter` with these solution cells, by check name."""
    student = student_copies.student_copy(chapter.notebook, chapter.name)
    for cell in student.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.endswith("-solution") and grade_id.removesuffix("-solution") in answers:
            cell.source = answers[grade_id.removesuffix("-solution")]
    return student


def test_the_guard_and_the_barrier_stop_every_cheat_that_fools_an_unguarded_grader(tmp_path):
    """Each cheat of tests/toy_chapter.py, with wrong answers: without the guard and the
    barrier it scores (or, for a hidden error, only the kernel's reply tells); with them
    it scores nothing."""
    from concurrent.futures import ThreadPoolExecutor

    from toy_chapter import CHEATS, POINTS, WRONG, reading_the_source, toy_chapter

    toy = toy_chapter(tmp_path / "book")
    cheats = {**CHEATS, "read_source": reading_the_source(toy.path)}
    everything = set(WRONG)
    fooled = {"patched_package_class": {"ex4-rows"}, "bdb_quit": set(),
              "custom_exception_handler": set()}

    def both(cheat):
        student = answered(toy, cheats[cheat])
        return grading.grade(student, toy, guard=False), grading.grade(student, toy)

    with ThreadPoolExecutor(2) as pool:
        graded = dict(zip(cheats, pool.map(both, cheats), strict=True))
    for cheat, (unguarded, guarded) in graded.items():
        checked = [r for r in unguarded if not r.manual]
        assert {r.name for r in checked if r.passed} == fooled.get(cheat, everything), (cheat, checked)
        if cheat in ("bdb_quit", "custom_exception_handler"):  # no error shown, yet it failed
            assert all("the kernel reported an error that the notebook's output does not "
                       "show" in r.detail for r in checked), (cheat, checked)
        assert not any(r.passed for r in guarded), (cheat, guarded)
        assert sum(r.max_points for r in guarded if not r.manual) == POINTS
    assert "PermissionError" in str(graded["read_source"][1]) or all(
        "expected 2 x" in r.detail for r in graded["read_source"][1][:1])


def test_the_guard_refuses_a_shadowed_builtin_and_a_rebound_reference(tmp_path):
    from toy_chapter import toy_chapter

    toy = toy_chapter(tmp_path)
    student = student_copies.student_copy(toy.notebook, toy.name)
    answers = {  # what torch does to itself (a rewrapped manual_seed, a cache) is no cheat
               "ex1-double": "def double(x):\n    return 2 * x\n"
                             "import copy\nimport torch._dynamo\n_ = copy.deepcopy(torch.zeros(2))",
               "ex2-half": "def half(v):\n    return v\nabs = lambda x: 0\n"
                           "import types\nmath = types.SimpleNamespace(isclose=lambda *a: True)",
               "ex3-norm": "def norm(v):\n    return torch.linalg.vector_norm(v)\ntorch = None"}
    student = answered(toy, answers)
    results = {r.name: r for r in grading.grade(student, toy)}
    assert results["ex1-double"].passed, results["ex1-double"]
    assert "rebinds `abs`" in results["ex2-half"].detail and "rebinds `math`" in results["ex2-half"].detail
    assert "rebinds `torch`" in results["ex3-norm"].detail


# --- the gradebook (make grade) ------------------------------------------------------------

def solved_copy(chapter):
    """A student copy with every solution (and written answer) as the chapter has it."""
    solved = student_copies.student_copy(chapter.notebook, chapter.name)
    for cell, original in zip(solved.cells, chapter.notebook.cells, strict=True):
        if original.metadata.get("nbgrader", {}).get("solution"):
            cell.source = original.source  # markers and all: still the solution
    return solved


def read_csv(path):
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_gradebook_grades_a_folder_in_parallel_and_recognises_chapters(tmp_path):
    """Any file names; chapter from metadata, checks or title; the student from the first
    folder below the folders all notebooks share; a crash or a stray file becomes a row,
    not a stop; one feedback file per student; an earlier gradebook is never replaced
    without --force."""
    from toy_chapter import POINTS, toy_chapter

    from tools.notebooks import stamp_notebook

    book = tmp_path / "book"
    toy = toy_chapter(book)
    second = write_chapter(book / "02_add.ipynb", [SOLVED_1, CHECK_1, SOLVED_2, CHECK_2, SOLVED_3,
                                                   CHECK_3, SOLVED_4, CHECK_4])
    nb = nbformat.read(second, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# 02 · Adding things"))
    stamp_notebook(nb)
    nbformat.write(nb, second)
    add = read_chapter(second)

    returned = tmp_path / "returned" / "hw7"  # every notebook below hw7/: not a student
    for name in ("alice", "carol", "dave"):
        (returned / name).mkdir(parents=True)
    solved = solved_copy(toy)
    nbformat.write(solved, returned / "alice" / "my work (final).ipynb")
    untouched = student_copies.student_copy(toy.notebook)  # as nbgrader releases it: no chapter recorded
    del untouched.metadata["transformer_book"]
    nbformat.write(untouched, returned / "bob_toy (1).ipynb")
    by_title = student_copies.student_copy(add.notebook)
    del by_title.metadata["transformer_book"]
    for cell in by_title.cells:
        cell.metadata.pop("nbgrader", None)
    by_title.cells = [c for c in by_title.cells if not exercise_cells.check_name(c)]  # checks deleted
    nbformat.write(by_title, returned / "carol" / "02.ipynb")
    crash = nbformat.from_dict(solved)
    index = next(i for i, c in enumerate(crash.cells)
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "ex2-half-solution")
    crash.cells[index].source = "import os\nos._exit(1)"  # kills its kernel in exercise 2
    nbformat.write(crash, returned / "dave" / "toy.ipynb")
    (returned / "junk.ipynb").write_text("not a notebook")

    out = tmp_path / "graded"
    command = ["grade", str(tmp_path / "returned"), "--jobs", "2", "--out", str(out),
               "--book", str(book), "--timeout", "300"]
    status = exercises.main(command)
    assert status == 1  # one file could not be graded
    rows = read_csv(out / "gradebook.csv")
    assert list(rows[0]) == ["file", "student", "chapter", "exercise", "status", "points",
                             "max_points", "message"]
    got = {(r["student"], r["exercise"]): (r["status"], r["points"], r["message"]) for r in rows}
    assert got[("alice", "ex1-double")][:2] == ("passed", "1") and got[("alice", "ex2-half")][:2] == ("passed", "2")
    assert got[("alice", "ex4-why")] == ("to grade by hand", "", "The one-hot vector has a single "
                                         "1, so the product adds up exactly one row.")
    assert got[("bob", "ex2-half")][0] == "failed" and "not attempted" in got[("bob", "ex2-half")][2]
    assert got[("bob", "ex4-why")][:2] == ("not answered", "0")
    assert got[("carol", "ex1-add")] == ("failed", "0", "check cell missing from the notebook")
    assert got[("dave", "ex1-double")][0] == "passed"
    assert got[("dave", "ex2-half")][0] == "failed" and "kernel died" in got[("dave", "ex2-half")][2]
    assert got[("junk", "")][0] == "not graded" and "not a readable notebook" in got[("junk", "")][2]
    summary = {r["student"]: r for r in read_csv(out / "summary.csv")}
    assert summary["alice"]["01_toy"] == f"{POINTS}/{POINTS}" and summary["alice"]["percent"] == "100"
    assert summary["alice"]["by_hand_max"] == "2" and summary["bob"]["by_hand_max"] == "0"
    assert summary["bob"]["points"] == "0" and summary["dave"]["01_toy"] == f"1/{POINTS}"
    assert summary["alice"]["02_add"] == "missing"
    feedback = (out / "feedback" / "bob.md").read_text()
    assert "**failed** · `ex2-half` (0 of 2 points)" in feedback and "not attempted" in feedback
    assert "AssertionError" in (out / "feedback" / "dave.md").read_text() or \
        "kernel died" in (out / "feedback" / "dave.md").read_text()
    # a second run into the same folder is refused, unless forced
    assert exercises.main(command) == 2
    assert (out / "gradebook.csv").exists()


def test_a_roster_names_the_students_of_an_lms_download(tmp_path):
    """Canvas- and Moodle-style names, a file named in the roster, a stranger, and a
    student who handed in nothing (a summary row that says so)."""
    from toy_chapter import POINTS, toy_chapter

    toy = toy_chapter(tmp_path / "book")
    lms = tmp_path / "download"
    (lms / "Bob Li_4242_assignsubmission_file_").mkdir(parents=True)
    solved = solved_copy(toy)
    nbformat.write(solved, lms / "smithalice_83921_1200_hw3 final (1).ipynb")
    nbformat.write(student_copies.student_copy(toy.notebook, toy.name),
                   lms / "Bob Li_4242_assignsubmission_file_" / "hw3.ipynb")
    nbformat.write(solved, lms / "untitled.ipynb")
    nbformat.write(solved, lms / "someone else.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name,email,file\ns001,Alice Smith,asmith@uni.example,\n"
                      "s002,Bob Li,,\ns003,Carol Diaz,,untitled.ipynb\ns004,Dan Wu,,\n")
    out = tmp_path / "graded"
    status = exercises.main(["grade", str(lms), "--roster", str(roster), "--out", str(out),
                             "--book", str(tmp_path / "book"), "--jobs", "2"])
    assert status == 1  # "someone else.ipynb" matches nobody
    summary = {r["student"]: r for r in read_csv(out / "summary.csv")}
    assert summary["s001"]["01_toy"] == f"{POINTS}/{POINTS}"
    assert summary["s002"]["01_toy"] == f"0/{POINTS}"
    assert summary["s003"]["01_toy"] == f"{POINTS}/{POINTS}"
    assert summary["s004"]["01_toy"] == "missing" and summary["s004"]["notebooks"] == "0"
    assert set(summary) == {"s001", "s002", "s003", "s004"}
    rows = read_csv(out / "gradebook.csv")
    stray = [r for r in rows if r["file"].endswith("someone else.ipynb")]
    assert stray and stray[0]["status"] == "not graded" and "roster" in stray[0]["message"]
    assert (out / "feedback" / "s004.md").read_text().endswith("No notebook was handed in.\n")


def test_student_names_without_a_roster():
    from tools.returned_notebooks import Roster, shared_folder, student_of

    root = Path("/r")
    nested = [root / "hw7" / "alice" / "x.ipynb", root / "hw7" / "bob" / "y.ipynb"]
    assert shared_folder(nested, root) == root / "hw7"
    assert [student_of(p, root / "hw7", "07_blocks") for p in nested] == ["alice", "bob"]
    alone = [root / "alice" / "07.ipynb"]
    assert student_of(alone[0], shared_folder(alone, root), "07_blocks") == "alice"
    assert student_of(root / "07_blocks_carol (2).ipynb", root, "07_blocks") == "carol"
    roster = Roster(students=["a1", "a2"], aliases={"a1": [["ann", "lee"]], "a2": [["ann"]]})
    assert roster.match(Path("leeann_1_2_hw.ipynb"))[0] == "a1"  # the longer name wins
    assert roster.match(Path("ann/hw.ipynb"))[0] == "a2"
    assert roster.match(Path("anne/hw.ipynb"))[0] is None  # whole words only


def test_self_check_reports_each_exercise_with_the_hidden_tests(tmp_path, capsys):
    """`make check` runs the chapter's checks with their hidden tests, as grading does
    (nbgrader puts them back when it autogrades): an answer right on the visible test
    only fails there, and a written answer is reported as waiting to be graded by hand."""
    from toy_chapter import toy_chapter

    toy = toy_chapter(tmp_path / "book")
    copy = student_copies.student_copy(toy.notebook, toy.name)
    for cell in copy.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex3-norm-solution":
            cell.source = "def norm(v):\n    return torch.tensor(5.0)  # right on the visible test only"
        elif cell.metadata.get("nbgrader", {}).get("grade_id") == "ex1-double-solution":
            cell.source = "def double(x):\n    return x + x"
    path = tmp_path / "04 mine.ipynb"
    nbformat.write(copy, path)
    assert exercises.main(["check", str(path), "--chapter", str(toy.path)]) == 1
    out = capsys.readouterr().out
    assert "with its hidden tests" in out
    assert "FAILED  ex2-half  (not attempted: the solution still raises NotImplementedError)" in out
    assert "passed  ex1-double" in out and "FAILED  ex3-norm" in out
    assert "1 of 4 checked exercises passed (1 of 5 points)" in out
    assert "not answered ex4-why" in out and "2 points of written answers" in out


def test_jupytext_sync_keeps_nbgrader_metadata_and_stamp_covers_new_cells(tmp_path):
    """The .py pairs carry no nbgrader metadata (cell_metadata_filter = "tags,-all"), so a
    chapter edited in its .py gets it back from the .ipynb: jupytext keeps the metadata of
    the cells it matches; a new cell has none until `make sync` / `make execute` stamps it."""
    import shutil
    import subprocess

    from tools.notebooks import stamp_notebook

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
    check = next(c for c in synced.cells if exercise_cells.check_name(c) == "ex1-causal")
    assert check.metadata["nbgrader"]["points"] == 3


# --- the grading barrier ----------------------------------------------------------------------

def test_the_barrier_refuses_protected_paths_programs_and_the_c_library(tmp_path):
    """In a Python with the barrier: the protected folder cannot be read (a symbolic link
    to it neither), its exceptions can; a Python child gets the barrier too; other
    programs, a Python that skips the environment, and the functions of ctypes' C library
    and interpreter are refused (loading them is not: every child that imports torch does)."""
    import subprocess
    import textwrap

    repo = tmp_path / "repo"
    (repo / "chapters").mkdir(parents=True)
    (repo / "transformer").mkdir()
    (repo / "chapters" / "01.ipynb").write_text("solutions")
    (repo / "transformer" / "data.txt").write_text("data")
    (tmp_path / "link").symlink_to(repo / "chapters")
    barrier = ROOT / "tools" / "grading_barrier.py"
    code = textwrap.dedent(f"""
        import ctypes, os, runpy, subprocess, sys
        runpy.run_path({str(barrier)!r})["install"]([{str(repo)!r}], [{str(repo / "transformer")!r}])

        def attempt(what, action):
            try:
                action()
                print(what, "allowed")
            except PermissionError:
                print(what, "refused")

        attempt("open", lambda: open({str(repo / "chapters" / "01.ipynb")!r}).read())
        attempt("link", lambda: open({str(tmp_path / "link" / "01.ipynb")!r}).read())
        attempt("listdir", lambda: os.listdir({str(repo)!r}))
        attempt("exception", lambda: open({str(repo / "transformer" / "data.txt")!r}).read())
        child = subprocess.run([sys.executable, "-c", "open({str(repo / 'chapters' / '01.ipynb')!r})"],
                               capture_output=True, text=True)
        print("child", "refused" if "PermissionError" in child.stderr else "allowed")
        attempt("cat", lambda: subprocess.run(["cat", {str(repo / "chapters" / "01.ipynb")!r}]))
        attempt("isolated", lambda: subprocess.run([sys.executable, "-I", "-c", "pass"]))
        attempt("environment", lambda: subprocess.run([sys.executable, "-c", "pass"], env={{}}))
        attempt("system", lambda: os.system("true"))
        attempt("libc", lambda: ctypes.CDLL(None).open)
        attempt("libc.so.6", lambda: ctypes.CDLL("libc.so.6").system)
        attempt("pythonapi", lambda: ctypes.pythonapi.PyRun_SimpleString)
        # loading is not looking up: a child that imports ctypes (as torch and torchrun do,
        # loading the interpreter and the C library) runs
        loads = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libc.so.6')"],
                               capture_output=True, text=True)
        print("child_ctypes", "allowed" if loads.returncode == 0 else "refused")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    outcome = dict(line.split() for line in run.stdout.splitlines())
    assert outcome == {"open": "refused", "link": "refused", "listdir": "refused",
                       "exception": "allowed", "child": "refused", "cat": "refused",
                       "isolated": "refused", "environment": "refused", "system": "refused",
                       "libc": "refused", "libc.so.6": "refused", "pythonapi": "refused",
                       "child_ctypes": "allowed"}, (outcome, run.stderr[-2000:])


def test_a_chinese_student_copy_is_graded_by_the_english_chapters_checks(tmp_path):
    """`make student LANGUAGE=zh`: chapter 04's copy has the Chinese prose and the English
    code; handed back solved it passes every check of the English chapter, handed back as
    it was given it passes none (each 'not attempted')."""
    from tools.i18n_catalogues import catalogue_path, load

    assert exercises.main(["student", "chapters/04_causal_mask.py", "--language", "zh",
                           "--out", str(tmp_path)]) == 0
    copy = nbformat.read(tmp_path / "04_causal_mask.ipynb", as_version=4)
    english = read_chapter(Path("chapters/04_causal_mask.ipynb").resolve())
    title = load(catalogue_path("04_causal_mask"))[0].msgstr
    assert any(title in cell.source for cell in copy.cells if cell.cell_type == "markdown")
    solutions = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in english.notebook.cells
                 if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code"}
    results = grading.grade(copy, english)
    assert results and all("not attempted" in exercise_cells.in_student_terms(r.detail)
                           for r in results if not r.manual)
    for cell in copy.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in solutions:
            cell.source = solutions[grade_id]
    results = [r for r in grading.grade(copy, english) if not r.manual]
    assert len(results) == len(english.checks) and all(r.passed for r in results), results


def test_a_grader_that_ends_without_a_report_is_run_once_more(monkeypatch, tmp_path):
    """A kernel that fails to start or shut down is the machine's accident: the notebook is
    graded again, once; a notebook that breaks the grader every time is reported."""
    from tools import gradebook

    runs = []

    def flaky(path, chapter, timeout, threads, protect):
        runs.append(path)
        if len(runs) == 1:
            return {"file": str(path), "results": [], "crashed": True, "error": "the grader failed"}
        return {"file": str(path), "results": [{"name": "ex1", "passed": True}]}

    monkeypatch.setattr(gradebook, "_run_child", flaky)
    outcome = gradebook.run_worker(tmp_path / "a.ipynb", None, 60, 1)
    assert len(runs) == 2 and outcome["results"] and "crashed" not in outcome and "error" not in outcome

    runs.clear()
    monkeypatch.setattr(gradebook, "_run_child", lambda *args: runs.append(1) or {
        "file": "b.ipynb", "results": [], "crashed": True, "error": "the grader failed"})
    outcome = gradebook.run_worker(tmp_path / "b.ipynb", None, 60, 1)
    assert len(runs) == 2 and outcome["error"] == "the grader failed" and "crashed" not in outcome
