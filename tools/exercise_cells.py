"""What the exercise tools share about a chapter's cells: which cell is a check, what a
solution cell defines, its stub, what a run's outputs say.

Used by the modules behind `python -m tools.exercises` (tools/student_copies.py,
grading.py, exercise_verify.py, exercise_table.py, returned_notebooks.py, gradebook.py),
tools/exercise_proof.py (the proof around a run) and the website (the exercises folded
under their stubs). It imports none of them, only the book's directives
(tools/notebooks.py), so that they can all import it.
"""

from __future__ import annotations

import ast
import re

import nbformat

from tools.notebooks import BookError, check_directive, solution_regions

STUB = "raise NotImplementedError"
META_KEY = "transformer_book"  # notebook metadata of a student copy: chapter, content hash


def strip_solutions(source: str) -> str:
    """Replace each solution region (markers included) by an indented stub."""
    lines = source.splitlines()
    for begin, end in reversed(solution_regions(source)):
        indent = re.match(r"\s*", lines[begin]).group(0)
        lines[begin:end + 1] = [indent + STUB]
    return "\n".join(lines)


def check_name(cell: nbformat.NotebookNode) -> str | None:
    """NAME for a code cell whose first line is `#| check NAME [points=N]`."""
    if cell.cell_type != "code" or not cell.source.strip():
        return None
    try:
        found = check_directive(cell.source)
    except BookError:
        return None
    return found[0] if found else None


def error_of(cell: nbformat.NotebookNode) -> str | None:
    """'Ename: evalue' of a cell's error output, or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}".strip()
    return None


def stderr_of(cell: nbformat.NotebookNode) -> str | None:
    """The first line a cell wrote to stderr, or None (nbgrader fails a check that does)."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            return (output.get("text", "").strip().splitlines() or [""])[0][:200]
    return None


def in_student_terms(error: str) -> str:
    """A check's error, said for a gradebook: one line, a stub said as 'not attempted'."""
    if error.startswith("NotImplementedError"):
        return "not attempted: the solution still raises NotImplementedError"
    line = " | ".join(part.strip() for part in error.splitlines() if part.strip())
    return line if len(line) <= 500 else line[:497] + "..."


def defined_names(source: str) -> list[str]:
    """Top-level names a cell binds (def, class, import, assignment targets)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for child in ast.walk(node):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                    names.add(child.id)
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(child.name)
    return sorted(names)
