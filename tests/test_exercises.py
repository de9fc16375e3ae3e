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
    nb.metadata["kernelspec"] = {"name": "transformer-book", "display_name": "x", "language": "python"}
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


def test_structure_rules(tmp_path):
    path = write_chapter(tmp_path / "03_bad.ipynb", [SOLVED_1, SOLVED_2, CHECK_2])
    problems = exercises.structure_problems(read_chapter(path))
    assert any("solution with no `#| check`" in p for p in problems)
    assert any("2 exercises" in p for p in problems)
    assert any("was not executed" in p for p in problems)
