"""The teacher's table of exercises: every exercise of every chapter with its points.

book/teachers.md holds the table between two marker lines; `python -m tools.exercises
stamp` writes it there from the chapters' `#| check` cells, written answers and
`### Exercise N · ...` headings (`page_with_table`), and `stamp --check` says when it is
out of date (`table_problems`).

Used by tools/stamping.py (`stamp`) and tools/exercise_verify.py (`exercises_of`: how
many exercises a chapter has).
"""

from __future__ import annotations

import re

from tools.exercise_cells import check_name
from tools.notebooks import ROOT, BookError, Chapter, answer_directive

TEACHERS_PAGE = ROOT / "book" / "teachers.md"
TABLE_BEGIN = "<!-- exercise table: written by `make sync` from the chapters' checks; do not edit -->"
TABLE_END = "<!-- end of the exercise table -->"
EXERCISE_HEADING = re.compile(r"^#{2,4}\s*Exercise\s*(\d+)\s*[·.:-]?\s*(.*)$")


def exercises_of(chapter: Chapter) -> list[tuple[str, str, float]]:
    """(title, name, points) per exercise, in notebook order: each check, and each written
    answer (its name then reads `NAME (by hand)`); the title from its `### Exercise N · ...`.
    An exercise with a check and a written answer has one row for each."""
    found, heading = [], None
    for cell in chapter.notebook.cells:
        if cell.cell_type == "markdown":
            try:
                answer = answer_directive(cell.source)
            except BookError:
                answer = None
            if answer is not None:
                found.append((heading or answer[0], f"{answer[0]} (by hand)", answer[1]))
                continue
            for line in cell.source.splitlines():
                if (match := EXERCISE_HEADING.match(line.strip())) is not None:
                    heading = f"{match.group(1)} · {match.group(2).strip()}".strip(" ·")
        elif (name := check_name(cell)) is not None:
            found.append((heading or name, name, chapter.points.get(name, 1)))
    return found


def exercise_table(chapters: list[Chapter]) -> str:
    """The teacher's page table: every exercise of every chapter with its points."""
    lines = ["| Chapter | Exercise | Check (nbgrader `grade_id`) | Points |",
             "|---|---|---|---|"]
    total = 0.0
    for chapter in chapters:
        rows = exercises_of(chapter)
        points = sum(p for _, _, p in rows)
        total += points
        for i, (title, name, p) in enumerate(rows):
            short = chapter.title.split(":")[0]
            where = (f"{{doc}}`{chapter.number:02d} · {short} </chapters/{chapter.name}>` "
                     f"({points:g} points)" if i == 0 else "")
            grade_id = f"`{name.removesuffix(' (by hand)')}`" + (
                " (written, graded by hand)" if name.endswith("(by hand)") else "")
            lines.append(f"| {where} | {title} | {grade_id} | {p:g} |")
    count = sum(len({title for title, _, _ in exercises_of(chapter)}) for chapter in chapters)
    with_exercises = sum(1 for chapter in chapters if chapter.checks)
    lines.append(f"| **{with_exercises} chapters** | **{count} exercises** | | **{total:g}** |")
    return "\n".join(lines)


def page_with_table(text: str, chapters: list[Chapter]) -> str:
    """The teacher's page with its exercise table brought up to date."""
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise BookError(f"{TEACHERS_PAGE.relative_to(ROOT)} lost its exercise-table markers "
                        f"({TABLE_BEGIN!r} ... {TABLE_END!r})")
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{exercise_table(chapters)}\n{TABLE_END}{tail}"


def table_problems(chapters: list[Chapter]) -> list[str]:
    if not TEACHERS_PAGE.exists():
        return [f"{TEACHERS_PAGE.relative_to(ROOT)} is missing (the teacher's page)"]
    text = TEACHERS_PAGE.read_text()
    try:
        wanted = page_with_table(text, chapters)
    except BookError as err:
        return [str(err)]
    if wanted != text:
        return [f"{TEACHERS_PAGE.relative_to(ROOT)}: the table of exercises and points differs "
                "from the chapters' checks: run `make sync`"]
    return []
