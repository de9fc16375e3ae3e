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


def test_solutions_pass_and_stubs_fail(chapter):
    assert exercises.structure_problems(chapter) == []
    solved = exercises.grade(chapter.notebook, chapter)
    assert [(r.name, r.passed) for r in solved] == [
        ("ex1-add", True), ("ex2-square", True), ("ex3-answer", True)]
    assert exercises.verify(chapter) == []


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
    problems = exercises.verify(read_chapter(path))
    assert problems == ["check `ex1-add` passes on the student stub: it cannot tell a "
                        "solution from no solution"]


def test_structure_rules(tmp_path):
    path = write_chapter(tmp_path / "03_bad.ipynb", [SOLVED_1, SOLVED_2, CHECK_2])
    problems = exercises.structure_problems(read_chapter(path))
    assert any("solution with no `#| check`" in p for p in problems)
    assert any("2 exercises" in p for p in problems)
    assert any("was not executed" in p for p in problems)
